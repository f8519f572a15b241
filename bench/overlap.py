"""Who keeps the machine's CPUs busy at once, under blocking SendMessages to the services-mode platform.

    .venv/bin/python bench/overlap.py -c 1        # needs Debian's linux-perf, run as root

Starts the platform in services mode the way bench/run.py does, drives it with
bench/run.py's closed loop of blocking sends at concurrency `-c`, and while it
runs records every context switch of every CPU for `--seconds` (`perf record
-e sched:sched_switch -a`). From those it rebuilds which thread ran on each
CPU at every moment, names each by its role (web, worker: the platform's
processes and their threads; pg; redis; client: this script) and prints how
long 0, 1, 2... CPUs were busy, and which roles ran together.

What it is for: bench/run.py's growth ceiling. Throughput is CPUs busy over
CPU per answer, so at the same CPU per answer c=8 can be at most
CPUs / busy(c=1) times c=1. A c=1 request whose processes overlap (the worker
finishing its turn while the web answers) keeps more than one CPU busy on
average; this shows where that comes from.
"""

import argparse
import asyncio
import collections
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.run import (  # noqa: E402
    PLATFORM_DB,
    Sample,
    closed_loop,
    drop_database,
    interrupted,
    op_send,
    open_clients,
    prepare_platform,
    start_platform,
)
from tests.live import children, stop_processes  # noqa: E402

SWITCH = re.compile(r"\[(\d+)\]\s+([\d.]+):\s+sched:sched_switch:.*==> next_comm=(.*?) next_pid=(\d+)")
WARMUP = 30  # unmeasured blocking sends before the loop


def process_tree(pid: int) -> set[int]:
    """The process and every process below it."""
    found, todo = set(), [pid]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children(pid))
    return found


def threads_of(pids: set[int]) -> set[int]:
    """Every thread id of these processes: the scheduler switches threads, by their own ids."""
    tids = set()
    for pid in pids:
        try:
            tids.update(int(tid) for tid in os.listdir(f"/proc/{pid}/task"))
        except OSError:
            continue
    return tids


def role_of(pid: int, comm: str, roles: dict[int, str]) -> str | None:
    if pid == 0:
        return None  # the idle task
    if pid not in roles:
        known = {"postgres": "pg", "redis": "redis"}
        role = next((name for prefix, name in known.items() if comm.startswith(prefix)), None)
        roles[pid] = role or f"other ({comm})"
    return roles[pid]


def busy_periods(perf_script: str, roles: dict[int, str], cpus: int) -> tuple[float, dict, dict]:
    """(span, seconds with k CPUs busy, seconds per set of roles running together).

    The span starts once every CPU has switched at least once: before that, what
    ran on a CPU is not known.
    """
    switches = []
    for line in perf_script.splitlines():
        match = SWITCH.search(line)
        if match:
            switches.append((float(match[2]), int(match[1]), role_of(int(match[4]), match[3], roles)))
    switches.sort(key=lambda switch: switch[0])
    running: dict[int, str | None] = {}
    by_count, by_roles = collections.Counter(), collections.Counter()
    span = 0.0
    for (at, cpu, role), (next_at, _, _) in zip(switches, switches[1:], strict=False):
        running[cpu] = role
        if len(running) < cpus:
            continue
        busy = sorted(r for r in running.values() if r is not None)
        by_count[len(busy)] += next_at - at
        if busy:
            by_roles[" + ".join(busy)] += next_at - at
        span += next_at - at
    return span, by_count, by_roles


async def record_under_load(server, args, data: Path, sample: Sample) -> dict[int, str]:
    """perf's record of `args.seconds` inside a closed loop that outlasts it; the roles of the threads."""
    server.clients = open_clients(args.concurrency)
    warmed = asyncio.Event()

    async def load() -> None:
        for _ in range(WARMUP):
            await op_send(server.clients[0], server)
        warmed.set()
        await closed_loop(server, "send", args.concurrency, args.seconds + 3, sample)

    try:
        loop = asyncio.create_task(load())
        waiting = asyncio.create_task(warmed.wait())
        await asyncio.wait({loop, waiting}, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if loop.done():
            await loop  # the warm-up failed: raise its error
        await asyncio.sleep(1)  # the loop's start stays out of the record
        perf = await asyncio.create_subprocess_exec(
            "perf", "record", "-q", "-e", "sched:sched_switch", "-a", "-o", str(data),
            "--", "sleep", str(args.seconds),
        )  # fmt: skip
        if await perf.wait() != 0:
            raise SystemExit(f"perf record failed (exit {perf.returncode}): needs linux-perf, as root")
        # Named while the load still runs: the platform's processes and their threads, and this one's.
        web, worker = (proc.popen.pid for proc in server.procs)
        roles = dict.fromkeys(threads_of(process_tree(web)), "web")
        roles.update(dict.fromkeys(threads_of(process_tree(worker)), "worker"))
        roles.update(dict.fromkeys(threads_of({os.getpid()}), "client"))
        await loop
        return roles
    finally:
        for client in server.clients:
            await client.aclose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-c", "--concurrency", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=5.0, help="recorded, inside a longer load")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="as bench/run.py's")
    parser.add_argument("--debug", action="store_true")
    parser.add_argument("--postgres-url", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/5")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, interrupted)
    sample = Sample()
    server = None
    with tempfile.TemporaryDirectory(prefix="a2a-overlap-") as work:
        work_dir = Path(work)
        try:
            env = prepare_platform(args, "services", work_dir)
            server = start_platform("services", env, work_dir, workers=args.workers)
            data = work_dir / "sched.data"
            roles = asyncio.run(record_under_load(server, args, data, sample))
            script = subprocess.run(
                ["perf", "script", "-i", str(data)], capture_output=True, text=True, check=True
            ).stdout
        except BaseException:
            for proc in server.procs if server else []:
                print(f"--- {proc.name} log tail\n{proc.output()[-3000:]}", file=sys.stderr)
            raise
        finally:
            if server is not None:
                stop_processes(server.procs)
            drop_database(args, PLATFORM_DB)
    span, by_count, by_roles = busy_periods(script, roles, os.cpu_count() or 1)
    if sample.bad:
        print(f"{sample.bad} bad answers (first: {sample.first_bad}): no figures", file=sys.stderr)
        return 1
    if not span:
        print("perf recorded no context switches", file=sys.stderr)
        return 1
    answers = len(sample.latencies) / sample.wall
    print(f"\nservices, blocking send, c={args.concurrency}: {answers:.1f} req/s; {span:.2f} s recorded")
    print(f"CPUs busy on average: {sum(k * s for k, s in by_count.items()) / span:.2f}")
    for count in sorted(by_count):
        print(f"  {count} busy: {by_count[count]:6.3f} s  {100 * by_count[count] / span:5.1f}%")
    print("who ran, by set of roles running at once (largest first):")
    for names, seconds in by_roles.most_common(14):
        print(f"  {seconds:6.3f} s  {100 * seconds / span:5.1f}%  {names}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
