"""Start the platform the way it runs for real, in processes of its own.

The benchmark (bench/run.py) starts its servers with these helpers too.

Embedded default: one `manage.py serve` process (Daphne + worker threads).
Services mode (DATABASE_URL and REDIS_URL set): a Daphne process and a
separate Celery worker process.
"""

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
TEST_HANDLERS = (
    "crash=tests.handlers.CrashingExecutor,silent=tests.handlers.SilentExecutor,"
    "stubborn=tests.handlers.StubbornExecutor,sleeper=tests.handlers.SleeperExecutor"
)
# A queue of this test session's own: a stray worker elsewhere never takes its turns.
TEST_QUEUE = f"a2a-test-{os.getpid()}"


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


def spawn(name: str, args: list[str], env: dict, log_dir: Path) -> Process:
    log = log_dir / f"{name}.log"
    handle = log.open("w")
    popen = subprocess.Popen(args, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT)
    return Process(name=name, popen=popen, log=log)


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


def http_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


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
    env.update(extra or {})
    return env


def start_web(db_settings: dict, log_dir: Path, name: str = "web", extra_env: dict | None = None) -> Platform:
    """One web process; on the embedded default it carries the worker threads too."""
    port = free_port()
    env = child_env(db_settings, extra_env)
    if env.get("REDIS_URL"):
        args = daphne_args(port, "a2a_platform.asgi:application")
    else:
        args = [sys.executable, "manage.py", "serve", "--port", str(port), "--no-seed"]
    process = spawn(name, args, env, log_dir)
    platform = Platform(base_url=f"http://127.0.0.1:{port}", processes=[process])
    wait_until(lambda: http_ok(f"{platform.base_url}/readyz"), f"{name} to serve", [process])
    return platform


def start_worker(db_settings: dict, log_dir: Path) -> Process:
    return start_celery_worker("worker", child_env(db_settings), log_dir)


def daphne_args(port: int, app: str) -> list[str]:
    # -v 0: no access log, as `manage.py serve` runs Daphne.
    return [sys.executable, "-m", "daphne", "-v", "0", "-b", "127.0.0.1", "-p", str(port), app]


def start_celery_worker(name: str, env: dict, log_dir: Path) -> Process:
    """A separate Celery worker process, as `make worker` runs it, ready to take turns."""
    args = [sys.executable, "-m", "celery", "-A", "a2a_platform", "worker", "--pool", "threads"]
    args += ["--concurrency", "8", "--loglevel", "INFO", "--without-gossip", "--without-mingle"]
    process = spawn(name, args, env, log_dir)
    wait_until(lambda: "ready." in process.output(), "the Celery worker", [process])
    return process
