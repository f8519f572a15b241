import functools
import os
import time
from pathlib import Path

import httpx
import pytest

from tests.live import ROOT, Platform, start_web, start_worker

SERVICES_MODE = bool(os.environ.get("REDIS_URL"))
ARTIFACTS = ROOT / "test-artifacts"


LOG_TAIL_LINES = 80


def pytest_configure(config):
    if os.environ.get("DATABASE_URL", "").startswith("postgres"):
        # Hypothesis warns when the random module's global state changes while it draws
        # an example, whichever thread changed it. On PostgreSQL this process's psycopg
        # pool opens connections on threads of its own, each with a lifetime jittered by
        # random.random(). Only there: on SQLite the warning would be our strategies'.
        config.addinivalue_line(
            "filterwarnings",
            "ignore:Do not use the `random` module inside strategies"
            ":hypothesis.errors.HypothesisDeprecationWarning",
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing test's report carries the tail of every server log of this run.

    The servers run in processes of their own; without this, a failure in CI
    shows the client's side only.
    """
    report = yield
    if report.failed and call.when == "call":
        logs = ARTIFACTS / "logs" / str(os.getpid())
        for log in sorted(logs.glob("*.log")) if logs.is_dir() else []:
            lines = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
            report.sections.append((f"server log {log.name} (last {len(lines)} lines)", "\n".join(lines)))
    return report


@pytest.fixture(scope="session")
def log_dir() -> Path:
    path = ARTIFACTS / "logs" / str(os.getpid())
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def django_db_setup(django_test_environment, django_db_blocker):
    """A test database for the whole session, shared with the server processes.

    pytest-django only creates one for tests marked django_db; ours talk to a
    live server instead and read what it committed, so ask for it directly.
    """
    from django.db import connection
    from django.test.utils import setup_databases, teardown_databases

    # A database of this session's own, so several test runs can share a machine.
    test_settings = connection.settings_dict.setdefault("TEST", {})
    if connection.vendor == "sqlite":
        test_settings["NAME"] = str(ROOT / "var" / f"test-{os.getpid()}.sqlite3")
    else:
        test_settings["NAME"] = f"test_{connection.settings_dict['NAME']}_{os.getpid()}"
    with django_db_blocker.unblock():
        config = setup_databases(verbosity=0, interactive=False, aliases={"default"})
    yield
    with django_db_blocker.unblock():
        if connection.vendor == "postgresql":
            # Async tests read through sync_to_async threads with their own connections.
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
        teardown_databases(config, verbosity=0)


@pytest.fixture(scope="session")
def stored(django_db_setup, django_db_blocker):
    """Session-wide database access in autocommit, so tests see what the server committed."""
    from a2a_platform.seed import seed_demo

    with django_db_blocker.unblock():
        seed_demo()
        yield


@pytest.fixture(scope="session")
def db_settings(stored) -> dict:
    from django.db import connection

    return dict(connection.settings_dict)


@pytest.fixture(scope="session")
def server(db_settings, log_dir) -> Platform:
    """The platform under test, in its own processes, on the test database."""
    worker = start_worker(db_settings, log_dir) if SERVICES_MODE else None
    try:
        server = start_web(db_settings, log_dir, grpc=True)
    except BaseException:
        if worker:
            worker.popen.kill()
        raise
    if worker:
        server.processes.append(worker)
    yield server
    server.stop()


@pytest.fixture
def demo_agent(stored):
    """Create (or reconfigure) a public agent of the demo tenant; returns its slug.

    Tests make their own agents rather than reconfigure the seeded ones, which
    other test files rely on as seeded.
    """
    from agents.models import Agent
    from tenants.models import Tenant

    def make(slug: str, handler: str, config: dict | None = None) -> str:
        Agent.objects.update_or_create(
            tenant=Tenant.objects.get(slug="demo"),
            slug=slug,
            defaults={
                "name": slug,
                "handler": handler,
                "config": config or {},
                "visibility": Agent.Visibility.PUBLIC,
                "enabled": True,
            },
        )
        return slug

    return make


def rpc_to(
    platform,
    method: str,
    params: dict | None = None,
    *,
    agent: str = "echo",
    tenant: str = "demo",
    version: str | None = "1.0",
    request_id="req-1",
    headers: dict | None = None,
) -> dict:
    """POST one JSON-RPC call to an agent of a running platform (tests/live.Platform); its decoded answer."""
    body = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        body["params"] = params
    sent = {"Content-Type": "application/json", **(headers or {})}
    if version:
        sent["A2A-Version"] = version
    response = httpx.post(platform.agent_url(agent, tenant), json=body, headers=sent, timeout=30)
    assert response.headers["content-type"].startswith("application/json"), response.text
    return response.json()


@pytest.fixture
def rpc(server):
    """POST one JSON-RPC call to an agent of the session's server and return the decoded response."""
    return functools.partial(rpc_to, server)


def user_message(text: str, message_id: str, **fields) -> dict:
    return {
        "message": {
            "role": "ROLE_USER",
            "messageId": message_id,
            "parts": [{"text": text}],
            **fields,
        }
    }


def slowed(monkeypatch, owner, name: str, seconds: float = 0.3) -> None:
    """owner.<name> answers what it read `seconds` late: callers racing through it all read before any writes.

    How a race test makes the window it checks wide open (a count read before a lock is
    taken, say), on real databases and threads.
    """
    read = getattr(owner, name)

    def late(*args, **kwargs):
        answer = read(*args, **kwargs)
        time.sleep(seconds)
        return answer

    monkeypatch.setattr(owner, name, late)
