"""Side-by-side benchmark: the platform's echo agent against the official a2a-sdk 1.3 server.

    .venv/bin/python bench/run.py --quick              # < 1 min: blocking send, c=1 and 8, 3 servers
    .venv/bin/python bench/run.py                      # every scenario at c=1, 8, 32, both modes
    .venv/bin/python bench/run.py --mode services --list-scale   # + ListTasks at 1k/100k/1M tasks
    .venv/bin/python bench/run.py --history            # + GetTask at history length 2 and 1,000
    .venv/bin/python bench/run.py --json var/bench/today.json

Servers, all on loopback, all behind Daphne, started the way tests/live.py starts them:

    platform-services   manage.py webserve (a Daphne process per CPU) + manage.py workserve
                        (--workers Celery worker processes, default one per CPU, 8 threads
                        among them), PostgreSQL + Redis (db 5)
    platform-embedded   `manage.py serve` (Daphne + worker threads), SQLite
    sdk-memory          bench/sdk_echo_server.py on the SDK's InMemoryTaskStore
    sdk-postgres        the same on the SDK's DatabaseTaskStore, same PostgreSQL, its own database

One closed-loop httpx client (c workers, one connection each) drives every server.
Each (scenario, concurrency) is split into rounds; every round gives each server
the same time slice, in an order that rotates and reverses from round to round,
so a burst of noise from elsewhere hits all servers alike. Any bad answer
(non-200, JSON-RPC error, an echo task that does not end COMPLETED, a timeout)
is counted in `bad` and makes the run invalid (exit status 1). Every row also
carries `cpu_ms`: the CPU time each of the server's own processes spent during
its measured slices, per answer (read from /proc/<pid>/stat). See bench/README.md.
"""

import argparse
import asyncio
import json
import os
import platform as host_platform
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
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
    stop_processes,
    wait_started,
    wait_until,
    webserve_args,
)

OUT_DIR = ROOT / "var" / "bench"
HEADERS = {"A2A-Version": "1.0", "Content-Type": "application/json"}
COMPLETED = "TASK_STATE_COMPLETED"
TERMINAL = {COMPLETED, "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"}
# A request that takes this long is a bad answer, not a data point.
REQUEST_TIMEOUT = 30.0
PID = os.getpid()
PLATFORM_DB = f"a2a_bench_{PID}"
SDK_DB = f"a2a_bench_sdk_{PID}"
PLATFORM_TASK_TABLE = "tasks_app_task"
PLATFORM_MESSAGE_TABLE = "tasks_app_message"
SDK_TASK_TABLE = "tasks"

SERVICES, EMBEDDED, SDK_MEMORY, SDK_POSTGRES = (
    "platform-services",
    "platform-embedded",
    "sdk-memory",
    "sdk-postgres",
)
BASELINES = (SDK_MEMORY, SDK_POSTGRES)
BASIC_SCENARIOS = ("send", "send_ri", "stream", "get")
# GetTask (no historyLength) on a COMPLETED echo task whose history holds this many
# messages (`--history`). A fresh echo task has 2: the user's and the WORKING status message.
HISTORY_SCENARIOS = {"get_h2": 2, "get_h1000": 1000}
ECHO_HISTORY = 2
LIST_PAGE_SIZE = 50
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- Processes ------------------------------------------------------------------


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process and its live children, all threads included (None if unreadable).

    Children count: `manage.py webserve` serves through the Daphne processes it starts.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Fields after the command name "(...)", which may itself hold spaces: state is
    # field 3 of proc(5), so utime (14) and stime (15) are at 11 and 12 here.
    fields = stat[stat.rindex(")") + 2 :].split()
    seconds = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    return seconds + sum(cpu_seconds(int(child)) or 0.0 for child in children)


def machine_busy_seconds() -> float | None:
    """CPU seconds all of this machine's CPUs spent busy since boot (/proc/stat; every process counts).

    What the slice's answers cost in all: the server's processes, PostgreSQL's
    backends, Redis and this client; it assumes nothing else runs during a
    measurement. None where /proc/stat cannot be read.
    """
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    # user nice system idle iowait irq softirq steal: busy is user, nice, system, irq and
    # softirq. Not steal: that is time the hypervisor gave to someone else.
    user, nice, system, _idle, _iowait, irq, softirq = (int(value) for value in fields[:7])
    return (user + nice + system + irq + softirq) / CLOCK_TICKS


def cpu_label(proc: Process) -> str:
    """The label of a process in `cpu_ms`: web / worker (all of them) for services mode, else server."""
    if proc.name.startswith("platform-worker"):
        return "worker"
    return {"platform-web": "web"}.get(proc.name, "server")


@dataclass
class Server:
    label: str
    rpc_url: str
    ready_url: str
    procs: list[Process] = field(default_factory=list)
    # How to reach its storage, for bulk loads: ("postgres", dbname) or ("sqlite", path).
    storage: tuple[str, str] | None = None
    task_id: str = ""  # one COMPLETED task, for GetTask
    last_ri_task: str = ""  # the last task a returnImmediately send accepted
    clients: list[httpx.AsyncClient] = field(default_factory=list)
    # GetTask at history length: scenario -> the COMPLETED task it reads, and what its
    # answer carries (number of history messages, the newest one's messageId).
    history_tasks: dict[str, str] = field(default_factory=dict)
    history_answers: dict[str, tuple[int, str]] = field(default_factory=dict)

    def cpu_times(self) -> dict[str, float]:
        """CPU seconds used so far by each of this server's own processes, by cpu_label."""
        times = {}
        for proc in self.procs:
            seconds = cpu_seconds(proc.popen.pid)
            if seconds is not None:
                times[cpu_label(proc)] = times.get(cpu_label(proc), 0.0) + seconds
        return times


def run_checked(args: list[str], env: dict, what: str) -> None:
    result = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")


def postgres_url(args, dbname: str) -> str:
    return f"{args.postgres_url.rstrip('/')}/{dbname}"


def pg_connect(args, dbname: str = "postgres"):
    import psycopg

    return psycopg.connect(postgres_url(args, dbname), autocommit=True)


def create_database(args, name: str) -> None:
    with pg_connect(args) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")


def drop_database(args, name: str) -> None:
    try:
        with pg_connect(args) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    except Exception as exc:  # the report matters more than the cleanup
        log(f"warning: could not drop database {name}: {exc}")


def platform_env(args, mode: str, var_dir: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", "REDIS_URL", "SQLITE_PATH", "CELERY_QUEUE")
    }
    env["A2A_VAR_DIR"] = str(var_dir)
    # As the SDK's servers run (daphne -v 0): no access log line per request.
    env["A2A_ACCESS_LOG"] = "false"
    if not args.debug:
        env.update(
            DEBUG="false",
            SECRET_KEY=f"bench-only-{uuid.uuid4().hex}{uuid.uuid4().hex}",
            ALLOWED_HOSTS="127.0.0.1,localhost",
        )
    if mode == "services":
        env.update(
            DATABASE_URL=postgres_url(args, PLATFORM_DB),
            REDIS_URL=args.redis_url,
            CELERY_QUEUE=f"a2a-bench-{PID}",
        )
    return env


def prepare_platform(args, mode: str, var_dir: Path) -> dict[str, str]:
    """Fresh database, migrated and seeded (demo tenant, public echo agent), as tests/live.py does."""
    var_dir.mkdir(parents=True, exist_ok=True)
    env = platform_env(args, mode, var_dir)
    if mode == "services":
        create_database(args, PLATFORM_DB)
    manage = [sys.executable, "manage.py"]
    run_checked([*manage, "migrate", "--verbosity", "0", "--no-input"], env, f"migrate ({mode})")
    run_checked([*manage, "seed_demo"], env, f"seed_demo ({mode})")
    return env


def start_platform(mode: str, env: dict, log_dir: Path, workers: int = 1) -> Server:
    procs: list[Process] = []
    try:
        return _start_platform(mode, env, log_dir, workers, procs)
    except BaseException:
        stop_processes(procs)  # a platform that never got ready is not left running
        raise


def _start_platform(mode: str, env: dict, log_dir: Path, workers: int, procs: list[Process]) -> Server:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    if mode == "services":
        # The web tier as deployed: a Daphne process per CPU on the port (WEB_PROCESSES).
        procs.append(spawn("platform-web", webserve_args(port), env, log_dir))
        # The workers as deployed: `manage.py workserve`, `workers` Celery worker processes
        # sharing WORKER_THREADS (8) threads (README, Scale-out).
        workserve = [sys.executable, "manage.py", "workserve", "--processes", str(workers)]
        workserve += ["--", "--without-gossip", "--without-mingle"]
        launcher = spawn("platform-worker", workserve, env, log_dir)
        procs.append(launcher)
        wait_until(lambda: launcher.output().count("ready.") >= workers, "the workers to be ready", procs)
        storage = ("postgres", PLATFORM_DB)
    else:
        manage = [sys.executable, "manage.py"]
        serve = [*manage, "serve", "--port", str(port), "--no-seed", "--no-grpc"]
        procs.append(spawn("platform-embedded", serve, env, log_dir))
        storage = ("sqlite", str(Path(env["A2A_VAR_DIR"]) / "db.sqlite3"))
    label = SERVICES if mode == "services" else EMBEDDED
    server = Server(label, f"{base}/a2a/demo/echo/", f"{base}/readyz", procs, storage)
    wait_until(lambda: http_ok(server.ready_url), f"{label} to serve", procs)
    return server


def start_sdk(args, store: str, log_dir: Path) -> Server:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "BENCH_SDK_URL": url, "BENCH_SDK_STORE": store}
    label, storage = SDK_MEMORY, None
    if store == "sql":
        env["BENCH_SDK_DB_URL"] = postgres_url(args, SDK_DB).replace(
            "postgres://", "postgresql+asyncpg://", 1
        )
        label, storage = SDK_POSTGRES, ("postgres", SDK_DB)
    proc = spawn(label, daphne_args(port, "bench.sdk_echo_server:app"), env, log_dir)
    server = Server(label, f"{url}/", f"{url}/.well-known/agent-card.json", [proc], storage)
    wait_started(proc, lambda: http_ok(server.ready_url), f"{label} to serve")
    return server


def start_servers(args, work_dir: Path, servers: list[Server]) -> None:
    """Starts the chosen servers; appends each to `servers` as soon as it runs (for cleanup)."""
    modes = {"services": ["services"], "embedded": ["embedded"], "both": ["services", "embedded"]}[args.mode]
    if args.sdk_postgres:
        create_database(args, SDK_DB)
    # Migrations are the slow part of starting: run them side by side.
    with ThreadPoolExecutor(max_workers=2) as pool:
        envs = {mode: pool.submit(prepare_platform, args, mode, work_dir / f"var-{mode}") for mode in modes}
        servers.append(start_sdk(args, "memory", work_dir))
        if args.sdk_postgres:
            servers.append(start_sdk(args, "sql", work_dir))
        for mode in modes:
            servers.append(start_platform(mode, envs[mode].result(), work_dir, workers=args.workers))


def restart_servers(args, work_dir: Path, servers: list[Server]) -> None:
    """The servers stopped and started again on fresh databases, for ListTasks at scale.

    The scenarios before it leave thousands of tasks behind, with their messages:
    "1,000 stored tasks" would be however many they left, and the page at that
    scale their tasks, where the bulk copies of larger scales carry no history.
    Fresh, every scale holds exactly its count, and every page the same kind of
    task (the newest task and its copies).
    """
    stop_processes([proc for server in servers for proc in server.procs])
    servers.clear()
    log("Starting fresh servers for ListTasks at scale ...")
    (work_dir / "lists").mkdir()
    start_servers(args, work_dir / "lists", servers)


# --- Requests ---------------------------------------------------------------------


class Bad(Exception):
    """A bad answer: counted in `bad`, never a data point."""


def rpc_body(method: str, params: dict) -> dict:
    return {"jsonrpc": "2.0", "id": uuid.uuid4().hex[:12], "method": method, "params": params}


def send_params(return_immediately: bool = False) -> dict:
    params = {"message": {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": [{"text": "hi"}]}}
    if return_immediately:
        params["configuration"] = {"returnImmediately": True}
    return params


async def rpc(client: httpx.AsyncClient, url: str, method: str, params: dict) -> dict:
    response = await client.post(url, json=rpc_body(method, params), headers=HEADERS)
    if response.status_code != 200:
        raise Bad(f"HTTP {response.status_code}: {response.text[:200]}")
    payload = response.json()
    if "error" in payload:
        raise Bad(f"JSON-RPC error: {payload['error']}")
    return payload.get("result") or {}


def state_of(task: dict) -> str | None:
    return (task.get("status") or {}).get("state")


async def op_send(client, server: Server) -> None:
    task = (await rpc(client, server.rpc_url, "SendMessage", send_params())).get("task") or {}
    if state_of(task) != COMPLETED or not task.get("artifacts"):
        raise Bad(f"SendMessage ended in {state_of(task)!r}, artifacts: {bool(task.get('artifacts'))}")
    server.task_id = task["id"]


async def op_send_ri(client, server: Server) -> None:
    task = (await rpc(client, server.rpc_url, "SendMessage", send_params(True))).get("task") or {}
    if not task.get("id") or state_of(task) not in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", COMPLETED):
        raise Bad(f"returnImmediately SendMessage answered {state_of(task)!r}")
    server.last_ri_task = task["id"]


async def op_stream(client, server: Server) -> tuple[float, float]:
    """(seconds to the first event, seconds to the final event); reads the stream to its end."""
    started = time.perf_counter()
    first = final = None
    body = rpc_body("SendStreamingMessage", send_params())
    async with client.stream("POST", server.rpc_url, json=body, headers=HEADERS) as response:
        if response.status_code != 200:
            raise Bad(f"HTTP {response.status_code}")
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            now = time.perf_counter()
            first = first or now
            payload = json.loads(line[5:])
            if "error" in payload:
                raise Bad(f"stream error: {payload['error']}")
            result = payload.get("result") or {}
            state = state_of(result.get("statusUpdate") or result.get("task") or {})
            if state in TERMINAL:
                if state != COMPLETED:
                    raise Bad(f"stream ended in {state}")
                final = now
    if final is None:
        raise Bad("stream closed without a final status")
    return first - started, final - started


async def op_get(client, server: Server) -> None:
    task = await rpc(client, server.rpc_url, "GetTask", {"id": server.task_id})
    task = task.get("task", task)
    if task.get("id") != server.task_id or state_of(task) != COMPLETED:
        raise Bad(f"GetTask returned {task.get('id')!r} in {state_of(task)!r}")


def history_of(task: dict) -> tuple[int, str]:
    """(number of history messages, the newest one's messageId) of a Task answer."""
    history = task.get("history") or []
    return len(history), (history[-1].get("messageId", "") if history else "")


async def get_history_task(client, server: Server, scenario: str) -> tuple[int, str]:
    """GetTask (no historyLength) of the scenario's task: checked, then what its history carries."""
    task_id = server.history_tasks[scenario]
    task = await rpc(client, server.rpc_url, "GetTask", {"id": task_id})
    task = task.get("task", task)
    if task.get("id") != task_id or state_of(task) != COMPLETED:
        raise Bad(f"GetTask returned {task.get('id')!r} in {state_of(task)!r}, not {task_id} COMPLETED")
    return history_of(task)


def history_op(scenario: str):
    """The op of a get_h<N> scenario: the right task, carrying the same history as when it was loaded."""

    async def op_get_history(client, server: Server) -> None:
        carried = await get_history_task(client, server, scenario)
        if carried != server.history_answers[scenario]:
            raise Bad(f"GetTask history {carried}, expected {server.history_answers[scenario]}")

    return op_get_history


async def op_list(client, server: Server) -> None:
    result = await rpc(client, server.rpc_url, "ListTasks", {"pageSize": LIST_PAGE_SIZE})
    if len(result.get("tasks") or []) != LIST_PAGE_SIZE:
        raise Bad(f"ListTasks returned {len(result.get('tasks') or [])} tasks")


OPS = {"send": op_send, "send_ri": op_send_ri, "stream": op_stream, "get": op_get, "list": op_list}
OPS.update({scenario: history_op(scenario) for scenario in HISTORY_SCENARIOS})


# --- Closed loop -------------------------------------------------------------------


@dataclass
class Sample:
    latencies: list[float] = field(default_factory=list)
    finals: list[float] = field(default_factory=list)  # stream: time to the final event
    wall: float = 0.0
    bad: int = 0
    first_bad: str = ""
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds per process label, in the slices
    busy: float = 0.0  # CPU seconds the whole machine spent busy in the slices (machine_busy_seconds)
    rounds: list[float] = field(default_factory=list)  # req/s of each slice, in order

    def add_cpu(self, before: dict[str, float], after: dict[str, float]) -> None:
        for label, seconds in after.items():
            self.cpu[label] = self.cpu.get(label, 0.0) + seconds - before.get(label, seconds)

    def record_bad(self, exc: BaseException) -> None:
        self.bad += 1
        if not self.first_bad:
            self.first_bad = f"{type(exc).__name__}: {exc}"[:300]


async def closed_loop(server: Server, kind: str, concurrency: int, seconds: float, sample: Sample) -> None:
    op = OPS[kind]
    deadline = time.perf_counter() + seconds

    async def worker(client: httpx.AsyncClient) -> None:
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            try:
                measured = await op(client, server)
            except (httpx.HTTPError, Bad, ValueError, KeyError) as exc:
                sample.record_bad(exc)
                continue
            if kind == "stream":
                sample.latencies.append(measured[0])
                sample.finals.append(measured[1])
            else:
                sample.latencies.append(time.perf_counter() - t0)

    started, answered = time.perf_counter(), len(sample.latencies)
    await asyncio.gather(*(worker(client) for client in server.clients[:concurrency]))
    elapsed = time.perf_counter() - started
    sample.wall += elapsed
    sample.rounds.append((len(sample.latencies) - answered) / elapsed)


async def drain(server: Server, sample: Sample, timeout: float = 120.0) -> None:
    """After returnImmediately sends: wait (untimed) until the last task accepted is COMPLETED."""
    if not server.last_ri_task:
        return
    deadline = time.monotonic() + timeout
    client = server.clients[0]
    while time.monotonic() < deadline:
        try:
            task = await rpc(client, server.rpc_url, "GetTask", {"id": server.last_ri_task})
        except (httpx.HTTPError, Bad, ValueError) as exc:
            sample.record_bad(exc)
            return
        task = task.get("task", task)
        if state_of(task) in TERMINAL:
            if state_of(task) != COMPLETED:
                sample.record_bad(Bad(f"returnImmediately task ended {state_of(task)}"))
            server.last_ri_task = ""
            return
        await asyncio.sleep(0.05)
    sample.record_bad(Bad("returnImmediately backlog not done in 120 s"))


def round_order(servers: list[Server], round_index: int) -> list[Server]:
    shift = round_index % len(servers)
    order = servers[shift:] + servers[:shift]
    return order if round_index % 2 == 0 else order[::-1]


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(pct / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def rows_of(server: str, scenario: str, concurrency: int, sample: Sample) -> list[dict]:
    busy = sample.busy  # 0.0: /proc/stat could not be read

    def row(name: str, latencies: list[float]) -> dict:
        ms = (lambda p: round(percentile(latencies, p) * 1000, 2)) if latencies else (lambda p: None)
        return {
            "server": server,
            "scenario": name,
            "concurrency": concurrency,
            "rps": round(len(latencies) / sample.wall, 1) if sample.wall else 0.0,
            "rps_rounds": [round(rps, 1) for rps in sample.rounds],  # one per round (slice), in order
            "p50_ms": ms(50),
            "p99_ms": ms(99),
            "bad": sample.bad,
            # CPU ms per answer of each of the server's own processes (threads included).
            "cpu_ms": {
                label: round(seconds * 1000 / len(latencies), 2) for label, seconds in sample.cpu.items()
            }
            if latencies
            else {},
            # The whole machine's CPU per answer, and how many of its CPUs were busy on average.
            "machine_cpu_ms": round(busy * 1000 / len(latencies), 2) if latencies and busy else None,
            "cores_busy": round(busy / sample.wall, 2) if sample.wall and busy else None,
            "n": len(latencies),
            "first_bad": sample.first_bad,
        }

    if scenario == "stream":
        return [row("stream_first", sample.latencies), row("stream_final", sample.finals)]
    return [row(scenario, sample.latencies)]


async def measure(servers: list[Server], scenarios: list[tuple[str, str]], concurrencies, args) -> list[dict]:
    """Rows of each (scenario, kind) at each concurrency on every server, all of them interleaved.

    Each round runs every server on every scenario at every concurrency, in an
    order that reverses from round to round (the servers' order also rotates).
    A ratio between two rows (c=8 against c=1, GetTask at 1,000 messages
    against 2) then compares the same minutes of the machine, whose speed
    drifts by more than those ratios' margins from one minute to the next.
    """
    units = [(scenario, kind, concurrency) for scenario, kind in scenarios for concurrency in concurrencies]
    samples = {(server.label, scenario, c): Sample() for server in servers for scenario, _, c in units}
    for round_index in range(args.rounds):
        order = units if round_index % 2 == 0 else units[::-1]
        for server in round_order(servers, round_index):
            for scenario, kind, concurrency in order:
                sample = samples[server.label, scenario, concurrency]
                # CPU is read around the slice and, for returnImmediately, the drain of
                # its backlog: the work the slice's answers started.
                cpu_before, busy_before = server.cpu_times(), machine_busy_seconds()
                await closed_loop(server, kind, concurrency, args.seconds, sample)
                if kind == "send_ri":
                    await drain(server, sample)
                sample.add_cpu(cpu_before, server.cpu_times())
                busy_after = machine_busy_seconds()
                if busy_before is not None and busy_after is not None:
                    sample.busy += busy_after - busy_before
        log(f"  round {round_index + 1}/{args.rounds}: {', '.join(sorted({s for s, _ in scenarios}))}")
    rows = []
    for scenario, _, concurrency in units:
        for server in servers:
            sample = samples[server.label, scenario, concurrency]
            for row in rows_of(server.label, scenario, concurrency, sample):
                if scenario in HISTORY_SCENARIOS:
                    row["history_messages"] = server.history_answers[scenario][0]
                rows.append(row)
    return rows


# --- Bulk load for ListTasks at scale ------------------------------------------------


def _pg_columns(conn, table: str) -> list[tuple[str, str]]:
    """(name, data type) of each column of `table`, in order: the loaders follow schema changes."""
    return conn.execute(
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_name = %s AND table_schema = 'public' ORDER BY ordinal_position",
        (table,),
    ).fetchall()


def _pg_copy_rows(args, dbname: str, table: str, add: int) -> None:
    """Copies the newest row of `table` `add` times: new ids, older timestamps, everything else alike.

    One INSERT ... SELECT from generate_series per 100,000 rows, straight into the
    database (no ORM, no round trip per row).
    """
    with pg_connect(args, dbname) as conn:
        columns = _pg_columns(conn, table)
        stamp = "last_updated" if table == SDK_TASK_TABLE else "status_timestamp"
        template = conn.execute(f"SELECT id FROM {table} ORDER BY {stamp} DESC LIMIT 1").fetchone()[0]
        exprs = []
        for name, data_type in columns:
            if name == "id":
                exprs.append("gen_random_uuid()" + ("::text" if data_type != "uuid" else ""))
            elif data_type.startswith("timestamp"):
                exprs.append(f"t.{name} - (g * interval '1 millisecond')")
            elif name == "client_task_id":
                exprs.append("NULL")
            elif table == SDK_TASK_TABLE and name == "history":
                exprs.append("'[]'::json")
            else:
                exprs.append(f"t.{name}")
        names = ", ".join(name for name, _ in columns)
        done = 0
        while done < add:
            batch = min(100_000, add - done)
            conn.execute(
                f"INSERT INTO {table} ({names}) SELECT {', '.join(exprs)} "
                f"FROM {table} t, generate_series(%s::int, %s::int) g WHERE t.id = %s",
                (done + 1, done + batch, template),
            )
            done += batch
        conn.execute(f"ANALYZE {table}")


def _pg_count(args, dbname: str, table: str) -> int:
    with pg_connect(args, dbname) as conn:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def _sqlite_fill(path: str, total: int) -> None:
    conn = sqlite3.connect(path, timeout=60)
    try:
        table = PLATFORM_TASK_TABLE
        have = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        if have >= total:
            return
        columns = conn.execute(f"PRAGMA table_info({table})").fetchall()
        template = conn.execute(f"SELECT id FROM {table} ORDER BY status_timestamp DESC LIMIT 1").fetchone()[
            0
        ]
        exprs = []
        for _cid, name, col_type, *_ in columns:
            if name == "id":
                exprs.append("lower(hex(randomblob(16)))")
            elif col_type.lower() == "datetime":
                exprs.append(f"strftime('%Y-%m-%d %H:%M:%f', t.{name}, '-' || (g.n / 1000.0) || ' seconds')")
            elif name == "client_task_id":
                exprs.append("NULL")
            else:
                exprs.append(f"t.{name}")
        names = ", ".join(column[1] for column in columns)
        add, done = total - have, 0
        while done < add:
            batch = min(100_000, add - done)
            conn.execute(
                f"WITH RECURSIVE g(n) AS (SELECT ? UNION ALL SELECT n + 1 FROM g WHERE n < ?) "
                f"INSERT INTO {table} ({names}) SELECT {', '.join(exprs)} FROM {table} t, g WHERE t.id = ?",
                (done + 1, done + batch, template),
            )
            conn.commit()
            done += batch
        conn.execute(f"ANALYZE {table}")
        conn.commit()
    finally:
        conn.close()


def fill_to(args, server: Server, total: int) -> None:
    """Brings the server's stored tasks (all the echo agent's, one anonymous owner) to `total`."""
    if server.label == SDK_MEMORY:
        response = httpx.post(
            server.rpc_url.rstrip("/") + "/_bench/fill", json={"total": total}, timeout=600, trust_env=False
        )
        response.raise_for_status()
    elif server.storage[0] == "postgres":
        table = SDK_TASK_TABLE if server.label == SDK_POSTGRES else PLATFORM_TASK_TABLE
        have = _pg_count(args, server.storage[1], table)
        if have < total:
            _pg_copy_rows(args, server.storage[1], table, total - have)
    else:
        _sqlite_fill(server.storage[1], total)


def scale_name(total: int) -> str:
    return f"list_{total // 1_000_000}m" if total >= 1_000_000 else f"list_{total // 1000}k"


async def measure_lists(servers: list[Server], args) -> list[dict]:
    rows = []
    for total in args.list_scale:
        t0 = time.perf_counter()
        for server in servers:
            await asyncio.to_thread(fill_to, args, server, total)
        log(f"  loaded {total:,} tasks into each server in {time.perf_counter() - t0:.0f} s")
        rows += await measure(servers, [(scale_name(total), "list")], args.list_concurrency, args)
    return rows


# --- Bulk load for GetTask at history length ----------------------------------------------


def _message_templates(conn, task_id, placeholder: str) -> tuple[list, object]:
    """Ids of the task's history rows (all but the status message), oldest first; the oldest's created_at."""
    rows = conn.execute(
        f"SELECT m.id, m.created_at FROM {PLATFORM_MESSAGE_TABLE} m JOIN {PLATFORM_TASK_TABLE} t "
        f"ON t.id = m.task_id WHERE m.task_id = {placeholder} "
        "AND (t.status_message_id IS NULL OR m.id <> t.status_message_id) ORDER BY m.created_at, m.id",
        (task_id,),
    ).fetchall()
    if len(rows) != ECHO_HISTORY:
        raise RuntimeError(f"task {task_id} has {len(rows)} history messages stored, not {ECHO_HISTORY}")
    return [row[0] for row in rows], rows[0][1]


def _pg_add_messages(args, dbname: str, task_id: str, add: int) -> None:
    """Adds `add` message rows to a platform task, older than its own: its history rows copied in turn.

    One INSERT ... SELECT from generate_series, straight into the database: copy g
    of `add` (1 = oldest) is the task's history row (g - 1) mod 2 with a new id and
    messageId and created_at (add + 1 - g) ms before the task's first message, its
    other timestamps moved by as much; every other column as in the template. The
    column list is read from the database.
    """
    with pg_connect(args, dbname) as conn:
        columns = _pg_columns(conn, PLATFORM_MESSAGE_TABLE)
        templates, first = _message_templates(conn, task_id, "%s")
        shift = "(%(first)s - t.created_at - (%(add)s + 1 - g) * interval '1 millisecond')"
        names, exprs = [], []
        for name, data_type in columns:
            if name == "id":
                continue  # the table's identity
            names.append(name)
            if name == "message_id":
                exprs.append("gen_random_uuid()::text")
            elif data_type.startswith("timestamp"):
                exprs.append(f"t.{name} + {shift}")
            else:
                exprs.append(f"t.{name}")
        conn.execute(
            f"INSERT INTO {PLATFORM_MESSAGE_TABLE} ({', '.join(names)}) SELECT {', '.join(exprs)} "
            f"FROM generate_series(1, %(add)s) g JOIN {PLATFORM_MESSAGE_TABLE} t "
            "ON t.id = (%(templates)s::bigint[])[1 + (g - 1) %% cardinality(%(templates)s::bigint[])] "
            "ORDER BY g",
            {"first": first, "add": add, "templates": templates},
        )
        conn.execute(f"ANALYZE {PLATFORM_MESSAGE_TABLE}")


def _sqlite_add_messages(path: str, task_id: str, add: int) -> None:
    """The SQLite version of _pg_add_messages (a recursive CTE instead of generate_series)."""
    conn = sqlite3.connect(path, timeout=60)
    try:
        task_key = uuid.UUID(task_id).hex  # Django stores a UUIDField as 32 hex digits on SQLite
        columns = conn.execute(f"PRAGMA table_info({PLATFORM_MESSAGE_TABLE})").fetchall()
        templates, first = _message_templates(conn, task_key, "?")
        # Days to move copy g's timestamps by (julianday arithmetic).
        shift = "(julianday(:first) - julianday(t.created_at) - (:add + 1 - g.n) / 86400000.0)"
        names, exprs = [], []
        for _cid, name, col_type, *_ in columns:
            if name == "id":
                continue  # INTEGER PRIMARY KEY AUTOINCREMENT
            names.append(name)
            if name == "message_id":
                exprs.append("lower(hex(randomblob(16)))")
            elif col_type.lower() == "datetime":
                exprs.append(f"strftime('%Y-%m-%d %H:%M:%f', julianday(t.{name}) + {shift})")
            else:
                exprs.append(f"t.{name}")
        conn.execute(
            "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < :add) "
            f"INSERT INTO {PLATFORM_MESSAGE_TABLE} ({', '.join(names)}) SELECT {', '.join(exprs)} "
            f"FROM g JOIN {PLATFORM_MESSAGE_TABLE} t "
            "ON t.id = CASE (g.n - 1) % 2 WHEN 0 THEN :t0 ELSE :t1 END ORDER BY g.n",
            {"first": first, "add": add, "t0": templates[0], "t1": templates[1]},
        )
        conn.execute(f"ANALYZE {PLATFORM_MESSAGE_TABLE}")
        conn.commit()
    finally:
        conn.close()


def _pg_sdk_history(args, dbname: str, task_id: str, add: int) -> None:
    """Prepends `add` messages to an SDK task's stored `history` JSON: its own, in turn, new messageIds."""
    from psycopg.types.json import Json

    with pg_connect(args, dbname) as conn:
        query = f"SELECT history FROM {SDK_TASK_TABLE} WHERE id = %s"
        history = conn.execute(query, (task_id,)).fetchone()[0]
        if len(history or []) != ECHO_HISTORY:
            raise RuntimeError(f"SDK task {task_id} has {len(history or [])} history messages stored")
        copies = [{**history[n % len(history)], "messageId": str(uuid.uuid4())} for n in range(add)]
        conn.execute(
            f"UPDATE {SDK_TASK_TABLE} SET history = %s::json WHERE id = %s", (Json(copies + history), task_id)
        )


def add_history(args, server: Server, task_id: str, add: int) -> None:
    """Gives the server's stored task `add` more history messages, older than its own two."""
    if server.label == SDK_MEMORY:
        response = httpx.post(
            server.rpc_url.rstrip("/") + "/_bench/fill",
            json={"task_id": task_id, "history": ECHO_HISTORY + add},
            timeout=60,
            trust_env=False,
        )
        response.raise_for_status()
    elif server.label == SDK_POSTGRES:
        _pg_sdk_history(args, server.storage[1], task_id, add)
    elif server.storage[0] == "postgres":
        _pg_add_messages(args, server.storage[1], task_id, add)
    else:
        _sqlite_add_messages(server.storage[1], task_id, add)


async def prepare_history(servers: list[Server], scenarios: list[str], args) -> None:
    """One new COMPLETED echo task per get_h<N> scenario and server, loaded to N history messages.

    The answer each server gives for it (messages carried, the newest one's id) is
    read once here; every measured answer must carry the same. The added messages are
    older than the task's own, so its newest history message stays the newest.
    """
    for server in servers:
        plain = server.task_id  # `get`'s task: a fresh echo task, not one loaded here
        for scenario in scenarios:
            client = server.clients[0]
            await op_send(client, server)
            server.history_tasks[scenario] = server.task_id
            carried = await get_history_task(client, server, scenario)
            if carried[0] != ECHO_HISTORY:
                raise Bad(f"{server.label}: a new echo task carries {carried[0]} history messages")
            if HISTORY_SCENARIOS[scenario] > ECHO_HISTORY:
                add = HISTORY_SCENARIOS[scenario] - ECHO_HISTORY
                await asyncio.to_thread(add_history, args, server, server.task_id, add)
                newest = carried[1]
                carried = await get_history_task(client, server, scenario)
                if carried[1] != newest:  # the copies are older: the newest message stays the newest
                    raise Bad(f"{server.label}: after the load the newest history message is {carried[1]}")
            server.history_answers[scenario] = carried
            log(
                f"  {server.label:<18} {scenario}: task {server.task_id}, "
                f"{HISTORY_SCENARIOS[scenario]} messages stored, {carried[0]} in its GetTask answer"
            )
        server.task_id = plain


# --- The run ---------------------------------------------------------------------------


def open_clients(count: int) -> list[httpx.AsyncClient]:
    """A client per concurrent request of the closed loop, each on one connection of its own."""
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    return [httpx.AsyncClient(timeout=REQUEST_TIMEOUT, limits=limits, trust_env=False) for _ in range(count)]


async def benchmark(servers: list[Server], args) -> list[dict]:
    """The scenarios' rows; with none, ListTasks at scale (main runs those on fresh servers after them)."""
    for server in servers:
        server.clients = open_clients(max([*args.concurrency, *args.list_concurrency]))
    try:
        # Checked answers first (a wrong server fails here, before any figure), then
        # an unmeasured warm-up of every scenario on every server.
        warm = Sample()
        for server in servers:
            await op_send(server.clients[0], server)
        if history := [kind for kind in args.scenarios if kind in HISTORY_SCENARIOS]:
            await prepare_history(servers, history, args)
        for kind in args.scenarios:
            for server in servers:
                await closed_loop(server, kind, max(args.concurrency), args.warmup, warm)
                if kind == "send_ri":
                    await drain(server, warm)
        if warm.bad:
            raise Bad(f"{warm.bad} bad answers during warm-up, first: {warm.first_bad}")
        rows = []
        for kind in [kind for kind in args.scenarios if kind not in HISTORY_SCENARIOS]:
            rows += await measure(servers, [(kind, kind)], args.concurrency, args)
        if history:
            # Together: their ratio is only fair from the same rounds.
            rows += await measure(servers, [(kind, kind) for kind in history], args.concurrency, args)
        if args.list_scale and not args.scenarios:
            rows += await measure_lists(servers, args)
        return rows
    finally:
        for server in servers:
            for client in server.clients:
                await client.aclose()


# --- Report ------------------------------------------------------------------------------


def ratio(a, b) -> str:
    return f"{a / b:.2f}" if a and b else "-"


def cpu_column(cpu_ms: dict[str, float]) -> str:
    """`cpu_ms` compactly: "3.1" for one process, "12.1+20.3" for web+worker."""
    return "+".join(f"{cpu_ms[label]:.1f}" for label in sorted(cpu_ms, key=CPU_ORDER.index)) or "-"


CPU_ORDER = ["server", "web", "worker"]


def table(rows: list[dict]) -> str:
    header = (
        f"{'scenario':<14}{'c':>3}  {'server':<19}{'req/s':>8}{'p50 ms':>9}{'p99 ms':>9}{'bad':>5}"
        f"{'cpu ms':>12}{'busy':>6}  | {'rps/mem':>8}{'p50/mem':>8}  | {'rps/pg':>7}{'p50/pg':>7}"
    )
    lines = [header, "-" * len(header)]
    groups: dict[tuple, dict] = {}
    for row in rows:
        groups.setdefault((row["scenario"], row["concurrency"]), {})[row["server"]] = row
    for (scenario, concurrency), by_server in groups.items():
        mem, pg = by_server.get(SDK_MEMORY, {}), by_server.get(SDK_POSTGRES, {})
        first = True
        for label in (SDK_MEMORY, SDK_POSTGRES, SERVICES, EMBEDDED):
            row = by_server.get(label)
            if row is None:
                continue
            name, conc = (scenario, str(concurrency)) if first else ("", "")
            first = False
            p50 = f"{row['p50_ms']:.1f}" if row["p50_ms"] is not None else "-"
            p99 = f"{row['p99_ms']:.1f}" if row["p99_ms"] is not None else "-"
            line = f"{name:<14}{conc:>3}  {label:<19}{row['rps']:>8.1f}{p50:>9}{p99:>9}{row['bad']:>5}"
            line += f"{cpu_column(row.get('cpu_ms') or {}):>12}"
            line += f"{row['cores_busy']:>6.2f}" if row.get("cores_busy") is not None else f"{'-':>6}"
            if label not in BASELINES:
                line += (
                    f"  | {ratio(row['rps'], mem.get('rps')):>8}{ratio(row['p50_ms'], mem.get('p50_ms')):>8}"
                )
                line += (
                    f"  | {ratio(row['rps'], pg.get('rps')):>7}{ratio(row['p50_ms'], pg.get('p50_ms')):>7}"
                )
            lines.append(line)
    return "\n".join(lines)


def growth(rows: list[dict], cpus: int) -> list[dict]:
    """Per server, scenario and concurrency above 1: req/s there over req/s at c=1, and the ceiling.

    The SDK's servers too: how their throughput grows is the yardstick for the platform's.

    The ceiling is what that ratio would be if the machine's CPUs were all
    busy at the higher concurrency with its CPU per answer (machine_cpu_ms):
    cpus / (CPU per answer) / (req/s at c=1). Throughput cannot grow past it
    without less CPU per answer.
    """
    by_key = {(row["server"], row["scenario"], row["concurrency"]): row for row in rows}
    out = []
    for (server, scenario, concurrency), one in by_key.items():
        if concurrency != 1 or not one["rps"]:
            continue
        for high in sorted({c for s, n, c in by_key if (s, n) == (server, scenario) and c > 1}):
            row = by_key[server, scenario, high]
            cpu_ms = row.get("machine_cpu_ms")
            out.append(
                {
                    "server": server,
                    "scenario": scenario,
                    "concurrency": high,
                    "ratio": round(row["rps"] / one["rps"], 2),
                    "ceiling": round(cpus * 1000 / cpu_ms / one["rps"], 2) if cpu_ms else None,
                    "machine_cpu_ms": [one.get("machine_cpu_ms"), cpu_ms],
                    "cores_busy": [one.get("cores_busy"), row.get("cores_busy")],
                }
            )
    return out


def growth_table(items: list[dict]) -> str:
    """growth() as the table printed after the main one."""
    lines = [
        "Throughput against c=1, and its ceiling here: every CPU busy at the machine's CPU per answer",
        f"{'scenario':<14}{'c':>3}  {'server':<19}{'x c=1':>7}{'ceiling':>9}{'machine cpu ms c=1, c':>23}"
        f"{'busy c=1, c':>13}",
    ]
    for item in items:
        ceiling = f"{item['ceiling']:.2f}" if item["ceiling"] is not None else "-"
        cpu = " / ".join(f"{value:.1f}" if value is not None else "-" for value in item["machine_cpu_ms"])
        busy = " / ".join(f"{value:.2f}" if value is not None else "-" for value in item["cores_busy"])
        lines.append(
            f"{item['scenario']:<14}{item['concurrency']:>3}  {item['server']:<19}{item['ratio']:>7.2f}"
            f"{ceiling:>9}{cpu:>23}{busy:>13}"
        )
    return "\n".join(lines)


def round_ratios(rows: list[dict]) -> list[dict]:
    """Per platform row and baseline: its req/s over the baseline's, round by round, lowest and highest.

    Both slices of a round ran within seconds of each other, so the spread of
    these pairs is what the machine's drift does to the ratio of the whole run.
    """
    by_key = {(row["server"], row["scenario"], row["concurrency"]): row for row in rows}
    out = []
    for (server, scenario, concurrency), row in by_key.items():
        if server in BASELINES:
            continue
        item = {"server": server, "scenario": scenario, "concurrency": concurrency}
        for baseline, key in ((SDK_MEMORY, "rps_mem"), (SDK_POSTGRES, "rps_pg")):
            base = by_key.get((baseline, scenario, concurrency))
            pairs = zip(row["rps_rounds"], base["rps_rounds"] if base else [], strict=False)
            ratios = [round(mine / theirs, 2) for mine, theirs in pairs if theirs]
            if ratios:
                item[key] = ratios
        if len(item) > 3:
            out.append(item)
    return out


def round_ratio_table(items: list[dict]) -> str:
    """round_ratios() as a table: each ratio's lowest and highest round."""
    lines = [
        "req/s over each baseline's in the same round: lowest - highest round",
        f"{'scenario':<14}{'c':>3}  {'server':<19}{'rps/mem':>13}{'rps/pg':>13}",
    ]
    for item in items:
        mem, pg = (
            f"{min(item[k]):.2f}-{max(item[k]):.2f}" if k in item else "-" for k in ("rps_mem", "rps_pg")
        )
        lines.append(f"{item['scenario']:<14}{item['concurrency']:>3}  {item['server']:<19}{mem:>13}{pg:>13}")
    return "\n".join(lines)


def history_ratios(rows: list[dict]) -> list[dict]:
    """Per server and concurrency: p50(get_h1000) / p50(get_h2), and the messages each answer carried."""
    by_key = {(row["server"], row["concurrency"], row["scenario"]): row for row in rows}
    short, long = sorted(HISTORY_SCENARIOS, key=HISTORY_SCENARIOS.get)
    out = []
    for (server, concurrency, scenario), row in by_key.items():
        other = by_key.get((server, concurrency, long))
        if scenario != short or other is None:
            continue
        out.append(
            {
                "server": server,
                "concurrency": concurrency,
                f"p50_ms_{short}": row["p50_ms"],
                f"p50_ms_{long}": other["p50_ms"],
                "p50_ratio": round(other["p50_ms"] / row["p50_ms"], 2)
                if row["p50_ms"] and other["p50_ms"]
                else None,
                f"messages_{short}": row.get("history_messages"),
                f"messages_{long}": other.get("history_messages"),
            }
        )
    return out


def history_table(ratios: list[dict]) -> str:
    short, long = sorted(HISTORY_SCENARIOS, key=HISTORY_SCENARIOS.get)
    lines = [
        f"GetTask at history length (no historyLength): p50 {long} / p50 {short}, "
        "and the history messages each answer carried",
        f"{'server':<19}{'c':>3}{'p50 ' + short:>12}{'p50 ' + long:>14}{'ratio':>7}{'carried':>12}",
    ]
    for item in ratios:
        ratio_text = f"{item['p50_ratio']:.2f}" if item["p50_ratio"] is not None else "-"
        carried = f"{item[f'messages_{short}']} / {item[f'messages_{long}']}"
        lines.append(
            f"{item['server']:<19}{item['concurrency']:>3}{item[f'p50_ms_{short}'] or 0:>12.1f}"
            f"{item[f'p50_ms_{long}'] or 0:>14.1f}{ratio_text:>7}{carried:>12}"
        )
    return "\n".join(lines)


def git_describe() -> str:
    try:
        run = lambda *a: subprocess.run(  # noqa: E731
            ["git", *a], cwd=ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        commit, dirty = (
            run("rev-parse", "--short", "HEAD"),
            run("status", "--porcelain", "--untracked-files=no"),
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if not commit:
        return "unknown (not a git checkout)"
    return f"{commit}{' (working tree modified)' if dirty else ''}"


def int_list(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="< 1 min: blocking send at c=1 and 8, 3 servers")
    parser.add_argument(
        "--mode",
        choices=["services", "embedded", "both"],
        help="platform mode(s) (default: both; quick: services)",
    )
    parser.add_argument(
        "--scenarios",
        help=f"comma list of {','.join(BASIC_SCENARIOS)}, {','.join(HISTORY_SCENARIOS)}, or none "
        f"(default: {','.join(BASIC_SCENARIOS)}; quick: send)",
    )
    parser.add_argument(
        "--history",
        action="store_true",
        help=f"also GetTask at history length 2 and 1,000 ({', '.join(HISTORY_SCENARIOS)})",
    )
    parser.add_argument("-c", "--concurrency", type=int_list, help="comma list (default 1,8,32; quick 1,8)")
    parser.add_argument(
        "--list-scale",
        nargs="?",
        const="1000,100000,1000000",
        type=int_list,
        default=[],
        help="also ListTasks (pageSize 50) at these stored-task counts (bare flag: 1000,100000,1000000)",
    )
    parser.add_argument(
        "--list-concurrency", type=int_list, default=[1, 8], help="for ListTasks (default 1,8)"
    )
    parser.add_argument("--rounds", type=int, help="rounds per scenario and concurrency (default 4; quick 3)")
    parser.add_argument(
        "--seconds", type=float, help="each server's time slice per round (default 1.0; quick 1.5)"
    )
    parser.add_argument(
        "--warmup", type=float, help="unmeasured seconds per scenario and server (default 1.0)"
    )
    parser.add_argument(
        "--no-sdk-postgres", dest="sdk_postgres", action="store_false", help="skip that baseline"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="services mode's Celery worker processes, sharing 8 threads (default: one per CPU)",
    )
    parser.add_argument("--debug", action="store_true", help="run the platform with DEBUG on (default: off)")
    parser.add_argument("--postgres-url", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/5", help="services mode (db 5)")
    parser.add_argument(
        "--json", type=Path, help="write the rows {server, scenario, concurrency, rps, ...} here"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory with server logs")
    args = parser.parse_args(argv)
    quick = args.quick
    args.mode = args.mode or ("services" if quick else "both")
    args.scenarios = (args.scenarios or ("send" if quick else ",".join(BASIC_SCENARIOS))).split(",")
    if args.scenarios == ["none"]:  # e.g. only ListTasks at scale
        args.scenarios = []
    if args.history:
        args.scenarios += [name for name in HISTORY_SCENARIOS if name not in args.scenarios]
    if unknown := set(args.scenarios) - {*BASIC_SCENARIOS, *HISTORY_SCENARIOS}:
        parser.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    args.concurrency = args.concurrency or ([1, 8] if quick else [1, 8, 32])
    # Ascending: a fill only adds tasks, so each scale must be the smallest not yet measured.
    args.list_scale = sorted(args.list_scale)
    args.rounds = args.rounds or (3 if quick else 4)
    args.seconds = args.seconds or (1.5 if quick else 1.0)
    args.warmup = args.warmup if args.warmup is not None else (0.7 if quick else 1.0)
    if min([*args.concurrency, *args.list_concurrency, args.rounds, args.workers]) < 1 or any(
        n < 100 for n in args.list_scale
    ):
        parser.error("concurrency, rounds and workers must be positive, list scales at least 100")
    return args


def interrupted(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # A SIGTERM stops the run the way Ctrl-C does: through the cleanup below.
    signal.signal(signal.SIGTERM, interrupted)
    started_at = datetime.now(UTC)
    load_before = os.getloadavg()
    work_dir = Path(tempfile.mkdtemp(prefix="a2a-bench-"))
    servers: list[Server] = []
    failed = False
    t_start = time.perf_counter()
    try:
        log(f"Starting servers (mode {args.mode}, logs in {work_dir}) ...")
        start_servers(args, work_dir, servers)
        log(f"  started in {time.perf_counter() - t_start:.0f} s:")
        for server in servers:
            pids = ", ".join(f"{proc.name} pid {proc.popen.pid}" for proc in server.procs)
            log(f"    {server.label:<18} {server.rpc_url}  ({pids})")
        t0 = time.perf_counter()
        rows = asyncio.run(benchmark(servers, args))
        elapsed = time.perf_counter() - t0
        if args.list_scale and args.scenarios:
            restart_servers(args, work_dir, servers)
            t0 = time.perf_counter()
            rows += asyncio.run(benchmark(servers, argparse.Namespace(**{**vars(args), "scenarios": []})))
            elapsed += time.perf_counter() - t0
    except BaseException:
        failed = True
        for server in servers:
            for proc in server.procs:
                log(f"--- {proc.name} log tail\n{proc.output()[-3000:]}")
        raise
    finally:
        # Only what this run started, by its Popen (pid); then its own databases.
        stop_processes([proc for server in servers for proc in server.procs])
        if args.mode in ("services", "both"):
            drop_database(args, PLATFORM_DB)
        if args.sdk_postgres:
            drop_database(args, SDK_DB)
        if args.keep or failed:
            log(f"Logs kept in {work_dir}")
        else:
            shutil.rmtree(work_dir, ignore_errors=True)

    load_after = os.getloadavg()
    report = {
        "started_at": started_at.isoformat(timespec="seconds"),
        "command": " ".join(["bench/run.py", *(argv if argv is not None else sys.argv[1:])]),
        "git": git_describe(),
        "services_workers": args.workers,
        "host": {
            "cpus": os.cpu_count(),
            "python": host_platform.python_version(),
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in load_after],
        },
        "settings": {
            key: getattr(args, key)
            for key in (
                "mode",
                "scenarios",
                "concurrency",
                "list_scale",
                "list_concurrency",
                "rounds",
                "seconds",
            )
        },
        "measure_seconds": round(elapsed, 1),
        "total_seconds": round(time.perf_counter() - t_start, 1),
        "rows": rows,
    }
    if ratios := history_ratios(rows):
        report["history_ratios"] = ratios
    if grown := growth(rows, os.cpu_count() or 1):
        report["growth"] = grown
    if per_round := round_ratios(rows):
        report["round_ratios"] = per_round
    out = args.json or OUT_DIR / f"{started_at.strftime('%Y%m%dT%H%M%SZ')}-{args.mode}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")

    print("\nA2A echo agent: the platform vs the official a2a-sdk 1.3 server, all on Daphne, loopback")
    print(
        f"git {report['git']}; {os.cpu_count()} CPUs; {args.workers} services worker process(es); "
        f"load avg {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after; measured in {report['measure_seconds']} s "
        f"(total {report['total_seconds']} s)\n"
    )
    print(table(rows))
    print("\nrps/x > 1: more requests a second than baseline x; p50/x < 1: lower median latency than x.")
    print(
        "cpu ms: CPU time of the server's own processes (all threads; web+worker in services mode) "
        "during its slices, per answer. busy: CPUs of the machine busy on average during them "
        "(returnImmediately: its drain's CPU too)."
    )
    if per_round:
        print("\n" + round_ratio_table(per_round))
    if grown:
        print("\n" + growth_table(grown))
    if ratios:
        print("\n" + history_table(ratios))
    print(f"JSON: {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    bad = sum(row["bad"] for row in rows if row["scenario"] != "stream_final")
    if bad:
        firsts = {
            f"{row['server']} {row['scenario']} c={row['concurrency']}: {row['first_bad']}" for row in rows
        }
        print(f"\nINVALID RUN: {bad} bad answers", file=sys.stderr)
        for line in sorted(f for f in firsts if not f.endswith(": ")):
            print(f"  {line}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
