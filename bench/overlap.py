"""Who keeps the machine's CPUs busy at once, under blocking SendMessages to the services-mode platform.

    .venv/bin/python bench/overlap.py -c 1        # needs Debian's linux-perf, run as root

Starts the platform in services mode the way bench/run.py does, drives it with
bench/run.py's closed loop of blocking sends at concurrency `-c`, and while it
runs records every context switch of every CPU for `--seconds` (`perf record
-e sched:sched_switch -a`). From those it rebuilds which process ran on each
CPU at every moment, names each process by its role (web, worker: the
platform's processes and their children; pg; redis; client: this script) and
prints how long 0, 1, 2... CPUs were busy, and with whom.

What it is for: bench/run.py's growth ceiling. A c=1 request whose processes
overlap (the worker finishing its turn while the web answers) keeps more than
one CPU busy on average; on a 2-CPU machine, c=8 can then be at most about
busy(c=8) / busy(c=1) times c=1 at the same CPU per answer. This shows where
c=1's extra busy time comes from.
"""

import argparse
import asyncio
import collections
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.run import (  # noqa: E402
    PLATFORM_DB,
    Sample,
    closed_loop,
    drop_database,
    op_send,
    prepare_platform,
    start_platform,
)
from tests.live import stop_processes  # noqa: E402

SWITCH = re.compile(r"\[(\d+)\]\s+([\d.]+):\s+sched:sched_switch:.*==> next_comm=(.*?) next_pid=(\d+)")


def descendants(pids: set[int]) -> set[int]:
    """The pids and every process below them, from /proc."""
    children = collections.defaultdict(set)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            children[int(stat[stat.rindex(")") + 2 :].split()[1])].add(int(entry))
    found, todo = set(), list(pids)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children[pid])
    return found


def threads_of(pids: set[int]) -> set[int]:
    """Every thread id of these processes (the scheduler switches threads, by their own ids)."""
    tids = set()
    for pid in pids:
        try:
            tids.update(int(tid) for tid in os.listdir(f"/proc/{pid}/task"))
        except OSError:
            continue
    return tids


def role_of(pid: int, comm: str, roles: dict[int, str]) -> str:
    if pid not in roles:
        known = {"postgres": "pg", "redis": "redis"}
        role = next((name for prefix, name in known.items() if comm.startswith(prefix)), None)
        roles[pid] = role or f"other ({comm})"
    return roles[pid]


def busy_periods(perf_script: str, roles: dict[int, str]) -> tuple[float, dict, dict]:
    """(span, seconds with k CPUs busy, seconds per set of roles running together)."""
    switches = []
    for line in perf_script.splitlines():
        match = SWITCH.search(line)
        if match:
            cpu, at, comm, pid = int(match[1]), float(match[2]), match[3], int(match[4])
            switches.append((at, cpu, None if pid == 0 else role_of(pid, comm, roles)))
    switches.sort()
    running: dict[int, str | None] = {}
    by_count, by_roles = collections.Counter(), collections.Counter()
    for (at, cpu, role), (next_at, _, _) in zip(switches, switches[1:], strict=False):
        running[cpu] = role
        busy = sorted(r for r in running.values() if r is not None)
        by_count[len(busy)] += next_at - at
        if busy:
            by_roles[" + ".join(busy)] += next_at - at
    span = switches[-1][0] - switches[0][0] if switches else 0.0
    return span, by_count, by_roles


async def drive(server, concurrency: int, seconds: float, sample: Sample) -> None:
    server.clients = [
        httpx.AsyncClient(
            timeout=30, limits=httpx.Limits(max_connections=1, max_keepalive_connections=1), trust_env=False
        )
        for _ in range(concurrency)
    ]
    try:
        for _ in range(30):  # warm-up, unmeasured
            await op_send(server.clients[0], server)
        await closed_loop(server, "send", concurrency, seconds, sample)
    finally:
        for client in server.clients:
            await client.aclose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-c", "--concurrency", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=5.0, help="recorded (the load runs 4 s longer)")
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes, as bench/run.py")
    parser.add_argument("--debug", action="store_true")
    parser.add_argument("--postgres-url", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/5")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="a2a-overlap-") as work:
        work_dir = Path(work)
        server = start_platform(
            "services", prepare_platform(args, "services", work_dir), work_dir, workers=args.workers
        )
        try:
            sample = Sample()
            data = work_dir / "sched.data"

            async def record_under_load() -> None:
                task = asyncio.create_task(drive(server, args.concurrency, args.seconds + 4, sample))
                await asyncio.sleep(2)  # the warm-up and the loop's start stay out of the record
                perf = await asyncio.create_subprocess_exec(
                    "perf", "record", "-q", "-e", "sched:sched_switch", "-a", "-o", str(data),
                    "--", "sleep", str(args.seconds),
                )  # fmt: skip
                await perf.wait()
                await task

            asyncio.run(record_under_load())
            # Named while they still run: the platform's processes and their threads, and this one's.
            web, worker = (proc.popen.pid for proc in server.procs)
            roles = dict.fromkeys(threads_of(descendants({web})), "web")
            roles.update(dict.fromkeys(threads_of(descendants({worker})), "worker"))
            roles.update(dict.fromkeys(threads_of({os.getpid()}), "client"))
            script = subprocess.run(
                ["perf", "script", "-i", str(data)], capture_output=True, text=True, check=True
            ).stdout
        finally:
            stop_processes(server.procs)
            drop_database(args, PLATFORM_DB)
    span, by_count, by_roles = busy_periods(script, roles)
    answers = len(sample.latencies) / sample.wall if sample.wall else 0.0
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
