"""Start the platform the way it runs for real, in processes of its own.

The benchmark (bench/run.py) starts its servers with these helpers too.

Embedded default: one `manage.py serve` process (Daphne + worker threads).
Services mode (DATABASE_URL and REDIS_URL set): a Daphne process and a
separate Celery worker process (and, for the sweepers, a beat process).

The fault tests (tests/faults) also bring their own Redis (RedisServer) and
PostgreSQL (PostgresCluster) on free loopback ports, to stop and restart them.
"""

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
TEST_HANDLERS = (
    "crash=tests.handlers.CrashingExecutor,silent=tests.handlers.SilentExecutor,"
    "cancelled-inside=tests.handlers.CancelledInsideExecutor,ask-then-gate=tests.handlers.AskThenGateExecutor,"
    "stubborn=tests.handlers.StubbornExecutor,sleeper=tests.handlers.SleeperExecutor,"
    "replier=tests.handlers.MessageReplyExecutor,gated=tests.handlers.GatedReplyExecutor,"
    "gated-open=tests.handlers.OpenGatedReplyExecutor,ticker=tests.handlers.TickerExecutor,"
    "ask-then-linger=tests.handlers.AskThenLingerExecutor,unstorable=tests.handlers.UnstorableExecutor"
)
# A queue of this test session's own: a stray worker elsewhere never takes its turns.
TEST_QUEUE = f"a2a-test-{os.getpid()}"
_metrics_dir: Path | None = None


def metrics_dir() -> Path:
    """A new, empty PROMETHEUS_MULTIPROC_DIR (prometheus_client wants one wiped before processes start).

    Removed when the test session ends.
    """
    path = Path(tempfile.mkdtemp(prefix="a2a-test-metrics-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def session_metrics_dir() -> Path:
    """The metrics directory this session's services-mode processes share: /metrics counts them all."""
    global _metrics_dir
    if _metrics_dir is None:
        _metrics_dir = metrics_dir()
    return _metrics_dir


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def database_env(settings_dict: dict) -> dict[str, str]:
    """Environment that points a child process at the test database."""
    if settings_dict["ENGINE"].endswith("sqlite3"):
        return {"SQLITE_PATH": str(settings_dict["NAME"])}
    user = settings_dict.get("USER") or ""
    password = f":{settings_dict['PASSWORD']}" if settings_dict.get("PASSWORD") else ""
    host = settings_dict.get("HOST") or "127.0.0.1"
    port = settings_dict.get("PORT") or 5432
    return {"DATABASE_URL": f"postgres://{user}{password}@{host}:{port}/{settings_dict['NAME']}"}


@dataclass
class Process:
    name: str
    popen: subprocess.Popen
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@dataclass
class Platform:
    base_url: str
    processes: list[Process] = field(default_factory=list)
    # host:port of the gRPC binding, when the platform serves it.
    grpc_target: str = ""

    def agent_url(self, agent: str, tenant: str = "demo") -> str:
        return f"{self.base_url}/a2a/{tenant}/{agent}/"

    def stop(self) -> None:
        stop_processes(self.processes)


def stop_processes(processes: list[Process]) -> None:
    for process in processes:
        if process.popen.poll() is None:
            process.popen.terminate()
    for process in processes:
        try:
            process.popen.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.popen.kill()
            process.popen.wait(timeout=5)


# setpriv execs the command in its own process, so the pid is the server's: a child that
# outlives a killed test session (SIGKILL, OOM) is killed with it instead of lingering.
SETPRIV = shutil.which("setpriv")


def spawn(name: str, args: list[str], env: dict, log_dir: Path) -> Process:
    log = log_dir / f"{name}.log"
    handle = log.open("w")
    if SETPRIV:
        args = [SETPRIV, "--pdeathsig", "KILL", "--", *args]
    popen = subprocess.Popen(args, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT)
    handle.close()
    return Process(name=name, popen=popen, log=log)


def kill_hard(process: Process) -> None:
    """kill -9 one process this session started, by its pid, and reap it."""
    if process.popen.poll() is None:
        os.kill(process.popen.pid, signal.SIGKILL)
    process.popen.wait(timeout=10)


def children(pid: int) -> list[int]:
    """The pids of a process's children (Linux), as launchers such as webserve start them."""
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def alive(pid: int) -> bool:
    """Whether a process runs (a zombie waiting to be reaped does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def wait_for(check, what: str, timeout: float = 30.0) -> None:
    """Poll `check` until it holds; AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def wait_until(check, what: str, processes: list[Process], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for process in processes:
            if process.popen.poll() is not None:
                raise RuntimeError(f"{process.name} exited early:\n{process.output()[-4000:]}")
        if check():
            return
        time.sleep(0.2)
    logs = "\n".join(f"--- {p.name}\n{p.output()[-4000:]}" for p in processes)
    raise RuntimeError(f"Timed out waiting for {what}\n{logs}")


def wait_started(process: Process, check, what: str, timeout: float = 60.0) -> None:
    """wait_until for a process just spawned: one that never got ready is not left running."""
    try:
        wait_until(check, what, [process], timeout=timeout)
    except BaseException:
        stop_processes([process])
        raise


def http_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


# Seconds between the checks of an open stream's caller on the servers under test (ten by default).
STREAM_RECHECK = 0.5


def child_env(db_settings: dict, extra: dict | None = None) -> dict[str, str]:
    env = {
        **os.environ,
        **database_env(db_settings),
        "A2A_EXTRA_HANDLERS": TEST_HANDLERS,
        "CELERY_QUEUE": TEST_QUEUE,
    }
    env.setdefault("PUSH_ALLOW_PRIVATE_NETWORKS", "true")
    env.setdefault("PROXY_ALLOW_PRIVATE_NETWORKS", "true")
    # Push tests: retries within a fraction of a second, and an agent that waits for one answer.
    env.setdefault("PUSH_RETRY_BASE_DELAY", "0.2")
    env.setdefault("PUSH_RETRY_MAX_DELAY", "1.0")
    env["A2A_EXTRA_HANDLERS"] += ",push-ask=tests.tasks_app.push_handlers.AskOnceExecutor"
    # Open streams check their caller again this often (tests/platform/test_stream_revocation.py).
    env["A2A_STREAM_RECHECK"] = str(STREAM_RECHECK)
    if env.get("REDIS_URL"):
        # Web and worker processes report one view on /metrics (prometheus_client multiprocess mode).
        env.setdefault("PROMETHEUS_MULTIPROC_DIR", str(session_metrics_dir()))
    env.update(extra or {})
    return env


def start_web(
    db_settings: dict, log_dir: Path, name: str = "web", extra_env: dict | None = None, grpc: bool = False
) -> Platform:
    """One web process; on the embedded default it carries the worker threads too.

    With `grpc`, the gRPC binding too: on a second port of `manage.py serve`, or in
    services mode as a `manage.py grpcserve` process of its own.
    """
    port = free_port()
    grpc_port = free_port() if grpc else None
    env = child_env(db_settings, extra_env)
    base_url = f"http://127.0.0.1:{port}"
    processes = []
    if env.get("REDIS_URL"):
        if grpc:
            env["A2A_GRPC_PUBLIC_URL"] = f"127.0.0.1:{grpc_port}"
            processes.append(start_grpc(f"{name}-grpc", env, log_dir, grpc_port, base_url))
        args = daphne_args(port, "a2a_platform.asgi:application")
    else:
        args = [sys.executable, "manage.py", "serve", "--port", str(port), "--no-seed"]
        args += ["--grpc-port", str(grpc_port)] if grpc else ["--no-grpc"]
    process = spawn(name, args, env, log_dir)
    platform = Platform(base_url=base_url, processes=[process, *processes])
    if grpc:
        platform.grpc_target = f"127.0.0.1:{grpc_port}"
    try:
        wait_started(process, lambda: http_ok(f"{platform.base_url}/readyz"), f"{name} to serve")
    except BaseException:
        stop_processes(processes)
        raise
    return platform


def start_grpc(name: str, env: dict, log_dir: Path, port: int, base_url: str) -> Process:
    """`manage.py grpcserve`, as `make grpc` runs it, listening."""
    args = [sys.executable, "manage.py", "grpcserve", "--port", str(port), "--base-url", base_url]
    process = spawn(name, args, env, log_dir)
    wait_started(process, lambda: "gRPC binding serving" in process.output(), "the gRPC server")
    return process


def start_worker(
    db_settings: dict, log_dir: Path, name: str = "worker", extra_env: dict | None = None
) -> Process:
    return start_celery_worker(name, child_env(db_settings, extra_env), log_dir)


def daphne_args(port: int, app: str) -> list[str]:
    # -v 0: no access log, as `manage.py serve` runs Daphne.
    return [sys.executable, "-m", "daphne", "-v", "0", "-b", "127.0.0.1", "-p", str(port), app]


def webserve_args(port: int, processes: int | None = None) -> list[str]:
    """Services mode's web tier as deployed: `manage.py webserve` (Daphne processes on one port)."""
    args = [sys.executable, "manage.py", "webserve", "--port", str(port)]
    return args + (["--processes", str(processes)] if processes else [])


def start_celery_worker(name: str, env: dict, log_dir: Path, threads: int = 8) -> Process:
    """A separate Celery worker process of 8 threads, as the compose file runs one, ready to take turns."""
    args = [sys.executable, "-m", "celery", "-A", "a2a_platform", "worker", "--pool", "threads"]
    args += ["--concurrency", str(threads), "--loglevel", "INFO", "--without-gossip", "--without-mingle"]
    process = spawn(name, args, env, log_dir)
    wait_started(process, lambda: "ready." in process.output(), "the Celery worker")
    return process


def start_beat(name: str, env: dict, log_dir: Path, state_dir: Path) -> Process:
    """The Celery beat process (the sweepers' clock), its schedule file in state_dir, not the repo."""
    args = [sys.executable, "-m", "celery", "-A", "a2a_platform", "beat", "--loglevel", "INFO"]
    args += ["-s", str(state_dir / "celerybeat-schedule")]
    process = spawn(name, args, env, log_dir)
    wait_started(process, lambda: "beat: Starting" in process.output(), "Celery beat")
    return process


def tcp_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class RedisServer:
    """A redis-server of the caller's own on a loopback port, without persistence.

    Stopping and starting it again keeps the port, so clients can reconnect; what
    it held (queued Celery messages, channel-layer groups) is gone, as after a crash.
    """

    def __init__(self, log_dir: Path, name: str = "redis"):
        self.log_dir = log_dir
        self.name = name
        self.port = free_port()
        self.process: Process | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.starts += 1
        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
        args += ["--save", "", "--appendonly", "no", "--daemonize", "no"]
        self.process = spawn(f"{self.name}-{self.starts}", args, dict(os.environ), self.log_dir)
        wait_started(self.process, self.ping, f"{self.name} to answer PING", timeout=20)

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            stop_processes([self.process])


def run_checked(args: list[str], what: str, timeout: float = 120, **kwargs) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kwargs)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


class PostgresCluster:
    """A throwaway PostgreSQL cluster on a loopback port, in a temporary directory.

    initdb refuses to run as root, so the cluster belongs to the `postgres` OS
    user when the session is root. The directory holds the pid of the session
    that made it: a later session removes clusters whose owner died (remove_stale()).
    """

    PREFIX = "a2a-test-pg-"

    def __init__(self, log_dir: Path):
        self.root = Path(tempfile.mkdtemp(prefix=self.PREFIX))
        (self.root / "owner.pid").write_text(str(os.getpid()))
        self.data = self.root / "data"
        self.sockets = self.root / "sockets"
        self.sockets.mkdir()
        # The server writes its log in its own directory; destroy() copies it to log_dir.
        self.server_log = self.root / "postgres.log"
        self.log_dir = log_dir
        self.port = free_port()
        self.as_owner = _as_postgres_user()
        if self.as_owner:
            for path in (self.root, self.sockets):
                shutil.chown(path, "postgres")

    def initdb(self) -> None:
        args = [*self.as_owner, "initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres"]
        run_checked([*args, "--no-instructions", "-E", "UTF8"], "initdb")

    def start(self) -> None:
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.sockets} -c fsync=on"
        args = [*self.as_owner, "pg_ctl", "-D", str(self.data), "-l", str(self.server_log), "-w", "-t", "60"]
        run_checked([*args, "-o", options, "start"], "pg_ctl start")

    def stop(self, mode: str = "fast") -> None:
        args = [*self.as_owner, "pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop"]
        run_checked(args, f"pg_ctl stop -m {mode}")

    def is_running(self) -> bool:
        args = [*self.as_owner, "pg_ctl", "-D", str(self.data), "status"]
        return subprocess.run(args, capture_output=True, timeout=30).returncode == 0

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def settings(self, database: str) -> dict:
        """A Django DATABASES entry, as child_env() and start_web() take it."""
        engine = "django.db.backends.postgresql"
        return {
            "ENGINE": engine,
            "NAME": database,
            "USER": "postgres",
            "HOST": "127.0.0.1",
            "PORT": self.port,
        }

    def destroy(self) -> None:
        """Stop the server if it runs (immediate: nothing in it is worth a checkpoint) and remove it."""
        try:
            if self.data.exists() and self.is_running():
                self.stop("immediate")
        finally:
            if self.server_log.exists() and getattr(self, "log_dir", None):
                shutil.copy(self.server_log, self.log_dir / f"postgres-{self.port}.log")
            shutil.rmtree(self.root, ignore_errors=True)

    @classmethod
    def remove_stale(cls) -> int:
        """Stop and remove the clusters of sessions that died without cleaning up."""
        removed = 0
        for root in Path(tempfile.gettempdir()).glob(f"{cls.PREFIX}*"):
            try:
                owner = int((root / "owner.pid").read_text())
            except (OSError, ValueError):
                continue
            if owner == os.getpid() or _alive(owner):
                continue
            stale = cls.__new__(cls)
            stale.root, stale.data, stale.server_log = root, root / "data", root / "postgres.log"
            stale.as_owner = _as_postgres_user()
            stale.destroy()
            removed += 1
        return removed


def _as_postgres_user() -> list[str]:
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
