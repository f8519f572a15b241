"""Services mode's workers on one host: several Celery worker processes, and one for the control lane.

A Celery worker process runs Python on one core at a time, as a Daphne
process does, so one process of eight threads leaves a second core idle
while its threads wait for one GIL. On this 2-core machine two processes of
four threads, against one of eight, took blocking sends at c=8 from 1.44x to
1.52-1.60x the SDK on PostgreSQL and p99 from about 150 to 80-95 ms
(bench/README.md). Workers keep nothing of their own (a turn's lease is a
row), so this command only starts them and keeps them running:

- PROCESSES children (WORKER_PROCESSES, else one per CPU, at most
  WORKER_THREADS), with the WORKER_THREADS turn threads shared out among
  them, or --concurrency threads each;
- each child is `celery worker --pool threads`, as the compose file runs one,
  with a node name of its own, and any further arguments after `--` (the
  control child's too);
- one more child of WORKER_CONTROL_THREADS threads (--control-threads) takes
  the control queue alone (WORKER_LANE=control), and the others the turn queue
  alone (WORKER_LANE=turns): webhook deliveries, cancels and beat's sweeps run
  there even while every turn thread runs a long turn. With 0, no such child,
  and the turn children take both queues (settings.CELERY_TASK_QUEUES);
- a child that exits is started again; the turn it was running comes back
  from its lease in the database (tasks_app/sweeper.py);
- SIGTERM or SIGINT give every child Celery's warm shutdown (it finishes
  its running turns) for up to --stop-timeout seconds, then kill it; its
  unfinished turns come back from their leases.
"""

import argparse
import os
import subprocess
import sys

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from a2a_platform.supervisor import Supervisor


def default_processes() -> int:
    """WORKER_PROCESSES, else one per CPU this process may run on, never more than WORKER_THREADS."""
    if settings.WORKER_PROCESSES:
        return settings.WORKER_PROCESSES
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cpus, settings.WORKER_THREADS))


def threads_of(slot: int, processes: int) -> int:
    """Slot `slot`'s share of WORKER_THREADS among `processes`: the first slots take the remainder."""
    share, rest = divmod(settings.WORKER_THREADS, processes)
    return max(1, share + (1 if slot < rest else 0))


class Command(BaseCommand):
    help = "Run the workers of services mode: PROCESSES Celery worker processes, supervised."

    def add_arguments(self, parser):
        parser.add_argument(
            "--processes",
            type=int,
            default=None,
            help="Celery worker processes (default: WORKER_PROCESSES, else one per CPU)",
        )
        parser.add_argument(
            "--concurrency",
            type=int,
            default=None,
            help="turn threads of each process (default: WORKER_THREADS shared out among the processes)",
        )
        parser.add_argument(
            "--control-threads",
            type=int,
            default=None,
            help="threads of the one more process that takes only the control queue "
            "(default: WORKER_CONTROL_THREADS; 0: no such process)",
        )
        parser.add_argument("--loglevel", default="INFO")
        parser.add_argument(
            "--stop-timeout",
            type=float,
            default=30.0,
            help="seconds a stopping worker gets to finish its running turns before it is killed",
        )
        parser.add_argument(
            "celery_args", nargs=argparse.REMAINDER, help="after --: more arguments for each `celery worker`"
        )

    def handle(
        self, *args, processes, concurrency, control_threads, loglevel, stop_timeout, celery_args, **options
    ):
        if settings.EMBEDDED_WORKER:
            raise CommandError(
                "workserve runs services mode's workers: set REDIS_URL (and DATABASE_URL); "
                "the embedded default runs its turns inside `manage.py serve`"
            )
        processes = default_processes() if processes is None else processes
        control = settings.WORKER_CONTROL_THREADS if control_threads is None else control_threads
        if processes < 1 or (concurrency is not None and concurrency < 1):
            raise CommandError("--processes and --concurrency must be at least 1")
        if control < 0:
            raise CommandError("--control-threads must be at least 0")
        extra = celery_args[1:] if celery_args[:1] == ["--"] else celery_args
        threads = [concurrency or threads_of(slot, processes) for slot in range(processes)]
        queues = settings.A2A_LANE_QUEUES
        if control:
            lanes = f"queue {queues['turns']}, and one process of {control} threads on {queues['control']}"
        else:
            lanes = f"queues {queues['turns']} and {queues['control']}"
        shares = "/".join(map(str, threads))
        self.stdout.write(f"Workers: {processes} Celery worker processes of {shares} threads on {lanes}")
        self.stdout.flush()
        start = _worker_starter(threads, control, loglevel, extra)
        Supervisor(processes + bool(control), start, "Worker process", stop_timeout).run()


def _worker_starter(threads: list[int], control: int, loglevel: str, extra: list[str]):
    """Starts the Celery worker of a slot, named after the slot and this launcher.

    Slots 0 .. len(threads) - 1 take turns with their share of threads (and
    control jobs too if there is no control slot); the slot after them, if
    `control`, takes the control queue alone.
    """
    launcher = os.getpid()

    def start(slot: int, preexec_fn) -> subprocess.Popen:
        command = [sys.executable, "-m", "celery", "-A", "a2a_platform", "worker", "--pool", "threads"]
        # A node name of its own: Celery warns of, and its remote control mixes up, namesakes.
        if slot < len(threads):
            command += ["--concurrency", str(threads[slot]), "-n", f"worker{slot + 1}-{launcher}@%h"]
            lane = "turns" if control else ""
        else:
            command += ["--concurrency", str(control), "-n", f"control-{launcher}@%h"]
            lane = "control"
        command += ["--loglevel", loglevel, *extra]
        env = {**os.environ, "WORKER_LANE": lane}
        return subprocess.Popen(command, cwd=settings.BASE_DIR, env=env, preexec_fn=preexec_fn)

    return start
