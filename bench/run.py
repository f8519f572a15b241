"""Side-by-side benchmark: the platform's echo agent against the official a2a-sdk server.

    make bench                                  # embedded default (SQLite, in-process worker)
    .venv/bin/python bench/run.py --mode services   # Daphne + Celery worker, PostgreSQL + Redis
    .venv/bin/python bench/run.py -n 100 -c 4 --rounds 2

Both servers run behind Daphne on loopback. The same client code (httpx) drives
both, and every workload is split into rounds that alternate between the two
servers (A B, then B A, ...), so a burst of noise from other work on the machine
hits both. Figures are reported as ratios platform/baseline from this one run;
absolute numbers from a shared machine mean little on their own. See bench/README.md.
"""

import argparse
import asyncio
import json
import os
import platform as host_platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.live import (  # noqa: E402
    Process,
    daphne_args,
    free_port,
    http_ok,
    spawn,
    start_celery_worker,
    stop_processes,
    wait_until,
)

OUT_DIR = ROOT / "var" / "bench"
HEADERS = {"A2A-Version": "1.0", "Content-Type": "application/json"}
TERMINAL = {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"}
BENCH_DB = "a2a_bench"
# Generous per-request timeout: a request that takes this long is an error, not a data point.
REQUEST_TIMEOUT = 30.0


# --- Processes ------------------------------------------------------------------
# Started the way the test suite starts them (tests/live.py), so both measure and
# test the same thing.


@dataclass
class Server:
    label: str
    rpc_url: str
    ready_url: str
    procs: list[Process] = field(default_factory=list)


def run_checked(args: list[str], env: dict, what: str) -> None:
    result = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    if result.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")


def start_baseline(log_dir: Path) -> Server:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "BENCH_SDK_URL": url}
    proc = spawn("sdk-baseline", daphne_args(port, "bench.sdk_echo_server:app"), env, log_dir)
    server = Server("sdk", rpc_url=f"{url}/", ready_url=f"{url}/.well-known/agent-card.json", procs=[proc])
    wait_until(lambda: http_ok(server.ready_url), "the SDK baseline to serve", [proc])
    return server


def platform_env(args, var_dir: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", "REDIS_URL", "SQLITE_PATH", "CELERY_QUEUE")
    }
    env["A2A_VAR_DIR"] = str(var_dir)
    if not args.debug:
        env.update(
            DEBUG="false",
            SECRET_KEY=f"bench-only-{uuid.uuid4().hex}{uuid.uuid4().hex}",
            ALLOWED_HOSTS="127.0.0.1,localhost",
        )
    if args.mode == "services":
        env.update(
            DATABASE_URL=f"{args.postgres_url.rstrip('/')}/{BENCH_DB}",
            REDIS_URL=args.redis_url,
            CELERY_QUEUE=f"a2a-bench-{os.getpid()}",
        )
    return env


def postgres_admin(args, statement: str, params: tuple = ()):
    import psycopg

    with psycopg.connect(f"{args.postgres_url.rstrip('/')}/postgres", autocommit=True) as conn:
        return conn.execute(statement, params).fetchone() if params else conn.execute(statement)


def postgres_sessions(args) -> int | None:
    """Connections ever opened to the bench database (PostgreSQL 14+), to spot per-request connects."""
    try:
        row = postgres_admin(args, "SELECT sessions FROM pg_stat_database WHERE datname = %s", (BENCH_DB,))
    except Exception:
        return None
    return row[0] if row else None


def start_platform(args, var_dir: Path, log_dir: Path) -> Server:
    env = platform_env(args, var_dir)
    if args.mode == "services":
        postgres_admin(args, f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
        postgres_admin(args, f"CREATE DATABASE {BENCH_DB}")
    manage = [sys.executable, "manage.py"]
    run_checked([*manage, "migrate", "--verbosity", "0", "--no-input"], env, "migrate")
    run_checked([*manage, "seed_demo"], env, "seed_demo")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    procs: list[Process] = []
    if args.mode == "services":
        procs.append(spawn("platform-web", daphne_args(port, "a2a_platform.asgi:application"), env, log_dir))
        procs.append(start_celery_worker("platform-worker", env, log_dir))
    else:
        procs.append(spawn("platform", [*manage, "serve", "--port", str(port), "--no-seed"], env, log_dir))
    server = Server("platform", rpc_url=f"{base}/a2a/demo/echo/", ready_url=f"{base}/readyz", procs=procs)
    wait_until(lambda: http_ok(server.ready_url), "the platform to serve", procs)
    return server


# --- Client workloads -------------------------------------------------------------


def rpc_body(method: str, params: dict) -> dict:
    return {"jsonrpc": "2.0", "id": f"req-{uuid.uuid4().hex[:8]}", "method": method, "params": params}


def send_params(text: str = "hi") -> dict:
    return {"message": {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": [{"text": text}]}}


class BenchError(Exception):
    pass


def task_of(payload: dict) -> dict:
    if "error" in payload:
        raise BenchError(f"JSON-RPC error: {payload['error']}")
    result = payload.get("result") or {}
    return result.get("task", result)


async def send_message(client: httpx.AsyncClient, url: str) -> dict:
    response = await client.post(url, json=rpc_body("SendMessage", send_params()), headers=HEADERS)
    response.raise_for_status()
    task = task_of(response.json())
    state = task.get("status", {}).get("state")
    if state != "TASK_STATE_COMPLETED" or not task.get("artifacts"):
        raise BenchError(f"SendMessage ended in {state!r}, artifacts={bool(task.get('artifacts'))}")
    return task


async def stream_message(client: httpx.AsyncClient, url: str) -> float:
    """Seconds from sending to the terminal status event; reads the stream to its end."""
    started = time.perf_counter()
    last_event = None
    events = 0
    body = rpc_body("SendStreamingMessage", send_params())
    async with client.stream("POST", url, json=body, headers=HEADERS) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            events += 1
            payload = json.loads(line[5:])
            if "error" in payload:
                raise BenchError(f"stream error: {payload['error']}")
            result = payload.get("result", {})
            state = (result.get("statusUpdate") or result.get("task") or {}).get("status", {}).get("state")
            if state in TERMINAL:
                if state != "TASK_STATE_COMPLETED":
                    raise BenchError(f"stream ended in {state}")
                last_event = time.perf_counter()
    if last_event is None:
        raise BenchError(f"stream closed after {events} events without a terminal status")
    return last_event - started


async def get_task(client: httpx.AsyncClient, url: str, task_id: str) -> None:
    response = await client.post(url, json=rpc_body("GetTask", {"id": task_id}), headers=HEADERS)
    response.raise_for_status()
    task = task_of(response.json())
    if task.get("id") != task_id:
        raise BenchError(f"GetTask returned {task.get('id')!r}")


@dataclass
class Sample:
    latencies: list[float] = field(default_factory=list)
    wall: float = 0.0  # seconds spent running the measured requests (summed over rounds)
    errors: int = 0
    first_error: str = ""

    def record_error(self, exc: Exception) -> None:
        self.errors += 1
        if not self.first_error:
            self.first_error = f"{type(exc).__name__}: {exc}"[:300]


def new_client(connections: int = 1) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    return httpx.AsyncClient(timeout=REQUEST_TIMEOUT, limits=limits, trust_env=False)


async def run_sequential(op, count: int, sample: Sample, deadline: float) -> None:
    async with new_client() as client:
        started = time.perf_counter()
        for _ in range(count):
            if time.monotonic() > deadline:
                break
            t0 = time.perf_counter()
            try:
                measured = await op(client)
            except (httpx.HTTPError, BenchError, ValueError) as exc:
                sample.record_error(exc)
                continue
            sample.latencies.append(measured if isinstance(measured, float) else time.perf_counter() - t0)
        sample.wall += time.perf_counter() - started


async def run_concurrent(op, count: int, clients: int, sample: Sample, deadline: float) -> None:
    remaining = count

    async def worker() -> None:
        nonlocal remaining
        async with new_client() as client:
            while remaining > 0 and time.monotonic() < deadline:
                remaining -= 1
                t0 = time.perf_counter()
                try:
                    await op(client)
                except (httpx.HTTPError, BenchError, ValueError) as exc:
                    sample.record_error(exc)
                    continue
                sample.latencies.append(time.perf_counter() - t0)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    sample.wall += time.perf_counter() - started


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(pct / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def summarize(sample: Sample) -> dict:
    if not sample.latencies:
        return {"count": 0, "errors": sample.errors, "first_error": sample.first_error}
    return {
        "count": len(sample.latencies),
        "errors": sample.errors,
        "first_error": sample.first_error,
        "median_ms": round(percentile(sample.latencies, 50) * 1000, 2),
        "p95_ms": round(percentile(sample.latencies, 95) * 1000, 2),
        "throughput_rps": round(len(sample.latencies) / sample.wall, 1) if sample.wall else 0.0,
        "wall_s": round(sample.wall, 2),
    }


async def benchmark(servers: list[Server], args) -> dict:
    # One existing task per server for GetTask, created (and checked) up front.
    task_ids = {}
    async with new_client() as client:
        for server in servers:
            task_ids[server.label] = (await send_message(client, server.rpc_url))["id"]

    def ops(server: Server) -> dict:
        url = server.rpc_url
        return {
            "send": lambda c: send_message(c, url),
            "stream": lambda c: stream_message(c, url),
            "get": lambda c: get_task(c, url, task_ids[server.label]),
        }

    # Warm-up: every kind of request on both servers, unmeasured.
    warm = Sample()
    for server in servers:
        for name, op in ops(server).items():
            await run_sequential(op, args.warmup, warm, time.monotonic() + args.max_seconds)
            if name == "send":
                await run_concurrent(
                    op, args.warmup, args.concurrency, warm, time.monotonic() + args.max_seconds
                )
    if warm.errors:
        raise BenchError(f"{warm.errors} errors during warm-up, first: {warm.first_error}")

    workloads = [
        ("send_sequential", "send", args.n, 1),
        ("send_concurrent", "send", args.n, args.concurrency),
        ("stream_sequential", "stream", args.stream_n, 1),
        ("get_task_sequential", "get", args.get_n, 1),
    ]
    results = {}
    for workload, kind, total, clients in workloads:
        samples = {server.label: Sample() for server in servers}
        per_round = max(1, total // args.rounds)
        for round_index in range(args.rounds):
            # Alternate the order each round: A B, B A, A B ...
            order = servers if round_index % 2 == 0 else list(reversed(servers))
            for server in order:
                op = ops(server)[kind]
                deadline = time.monotonic() + args.max_seconds
                if clients == 1:
                    await run_sequential(op, per_round, samples[server.label], deadline)
                else:
                    await run_concurrent(op, per_round, clients, samples[server.label], deadline)
        entry = {label: summarize(sample) for label, sample in samples.items()}
        entry["clients"] = clients
        base, ours = entry["sdk"], entry["platform"]
        if base.get("count") and ours.get("count"):
            entry["ratio"] = {
                "median": round(ours["median_ms"] / base["median_ms"], 2),
                "p95": round(ours["p95_ms"] / base["p95_ms"], 2),
                "throughput": round(ours["throughput_rps"] / base["throughput_rps"], 3),
            }
        results[workload] = entry
        print(f"  done: {workload}", file=sys.stderr, flush=True)
    return results


# --- Report ----------------------------------------------------------------------


def table(results: dict) -> str:
    header = (
        f"{'workload':<22}{'server':<10}{'n':>5}{'err':>5}{'median ms':>11}{'p95 ms':>9}{'req/s':>9}"
        f"   ratio platform/sdk (median, p95, throughput)"
    )
    lines = [header, "-" * len(header)]
    for workload, entry in results.items():
        name = workload if entry["clients"] == 1 else f"{workload} (c={entry['clients']})"
        for label in ("sdk", "platform"):
            row = entry[label]
            if not row.get("count"):
                lines.append(f"{name:<22}{label:<10}{0:>5}{row['errors']:>5}   no data: {row['first_error']}")
                continue
            ratio = ""
            if label == "platform" and "ratio" in entry:
                r = entry["ratio"]
                ratio = f"   x{r['median']:.2f}, x{r['p95']:.2f}, x{r['throughput']:.3f}"
            lines.append(
                f"{name:<22}{label:<10}{row['count']:>5}{row['errors']:>5}{row['median_ms']:>11.1f}"
                f"{row['p95_ms']:>9.1f}{row['throughput_rps']:>9.1f}{ratio}"
            )
            name = ""
    return "\n".join(lines)


def git_describe() -> str:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{commit}{' (working tree modified)' if dirty else ''}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mode", choices=["embedded", "services"], default="embedded")
    parser.add_argument(
        "-n", type=int, default=200, help="SendMessage calls per server (sequential, concurrent)"
    )
    parser.add_argument("-c", "--concurrency", type=int, default=8, help="concurrent clients")
    parser.add_argument("--stream-n", type=int, default=100, help="SendStreamingMessage calls per server")
    parser.add_argument("--get-n", type=int, default=200, help="GetTask calls per server")
    parser.add_argument("--warmup", type=int, default=20, help="unmeasured requests of each kind per server")
    parser.add_argument(
        "--rounds", type=int, default=10, help="alternations between the servers per workload"
    )
    parser.add_argument(
        "--max-seconds", type=float, default=30.0, help="time cap for one server's share of one round"
    )
    parser.add_argument("--debug", action="store_true", help="run the platform with DEBUG on (default: off)")
    parser.add_argument("--postgres-url", default="postgres://postgres@127.0.0.1:5432", help="services mode")
    parser.add_argument(
        "--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"), help="services mode"
    )
    parser.add_argument("--out", type=Path, help="JSON result file (default: var/bench/<time>-<mode>.json)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory with server logs")
    args = parser.parse_args(argv)
    if min(args.n, args.concurrency, args.stream_n, args.get_n, args.rounds) < 1 or args.warmup < 0:
        parser.error("counts must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started_at = datetime.now(UTC)
    load_before = os.getloadavg()
    work_dir = Path(tempfile.mkdtemp(prefix="a2a-bench-"))
    servers: list[Server] = []
    failed = False
    try:
        print(f"Starting servers (mode {args.mode}, logs in {work_dir}) ...", file=sys.stderr, flush=True)
        servers.append(start_baseline(work_dir))
        servers.append(start_platform(args, work_dir / "var", work_dir))
        sessions_before = postgres_sessions(args) if args.mode == "services" else None
        t0 = time.perf_counter()
        results = asyncio.run(benchmark(servers, args))
        elapsed = time.perf_counter() - t0
        sessions_after = postgres_sessions(args) if args.mode == "services" else None
    except BaseException:
        failed = True
        for server in servers:
            for proc in server.procs:
                print(f"--- {proc.name} log tail\n{proc.output()[-3000:]}", file=sys.stderr)
        raise
    finally:
        stop_processes([proc for server in servers for proc in server.procs])
        if args.mode == "services":
            try:
                postgres_admin(args, f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
            except Exception as exc:  # the report matters more than the cleanup
                print(f"warning: could not drop {BENCH_DB}: {exc}", file=sys.stderr)
        if args.keep or failed:
            print(f"Logs kept in {work_dir}", file=sys.stderr)
        else:
            shutil.rmtree(work_dir, ignore_errors=True)

    report = {
        "started_at": started_at.isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, "bench/run.py", *(argv or sys.argv[1:])]),
        "mode": args.mode,
        "settings": {
            "n": args.n,
            "concurrency": args.concurrency,
            "stream_n": args.stream_n,
            "get_n": args.get_n,
            "warmup": args.warmup,
            "rounds": args.rounds,
            "platform_debug": args.debug,
        },
        "host": {
            "cpus": os.cpu_count(),
            "python": host_platform.python_version(),
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        },
        "git": git_describe(),
        "measure_seconds": round(elapsed, 1),
        "results": results,
    }
    if sessions_before is not None and sessions_after is not None:
        # Every platform request of the run, warm-up included, against new database connections.
        requests = (
            1
            + 4 * args.warmup
            + sum(entry["platform"]["count"] + entry["platform"]["errors"] for entry in results.values())
        )
        report["postgres"] = {
            "sessions_opened": sessions_after - sessions_before,
            "platform_requests": requests,
        }
    out = args.out or OUT_DIR / f"{started_at.strftime('%Y%m%dT%H%M%SZ')}-{args.mode}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")

    print(f"\nA2A echo agent, platform ({args.mode}) vs official a2a-sdk server, both on Daphne, loopback")
    print(
        f"git {report['git']}; {os.cpu_count()} CPUs; load avg before {report['host']['loadavg_before'][0]}, "
        f"after {report['host']['loadavg_after'][0]}; measured in {report['measure_seconds']} s\n"
    )
    print(table(results))
    if "postgres" in report:
        pg = report["postgres"]
        print(
            f"\nPostgreSQL connections opened to {BENCH_DB} during the run: {pg['sessions_opened']} "
            f"for {pg['platform_requests']} platform requests (web and worker together)"
        )
    print("\nratio > 1 on latency = platform slower; ratio < 1 on throughput = platform slower.")
    print(f"JSON: {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    errors = sum(entry[label]["errors"] for entry in results.values() for label in ("sdk", "platform"))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
