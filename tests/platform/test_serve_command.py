"""The README's run command on a fresh machine: `manage.py serve` on the embedded default."""

import json
import os
import re
import sqlite3
import subprocess
import sys
import time

import httpx
import pytest

from tests.live import ROOT, database_env, free_port


def _serve(var_dir, port: int, database: dict | None = None) -> subprocess.Popen:
    """`manage.py serve` on its embedded default, or on `database` (a database_env()) without Redis."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "SQLITE_PATH"}}
    # The gRPC binding's second port: a free one, so that parallel runs do not collide on 50051.
    env.update(database or {}, A2A_VAR_DIR=str(var_dir), A2A_GRPC_PORT=str(free_port()))
    return subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _banner(process: subprocess.Popen) -> str:
    lines = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.strip().startswith("curl "):
            return "".join(lines)
    process.kill()
    raise AssertionError("serve printed no curl example:\n" + "".join(lines))


def _rest_of_banner(process: subprocess.Popen) -> str:
    """The banner's lines after the curl example, up to the management API line."""
    lines = []
    for line in iter(process.stdout.readline, ""):
        lines.append(line)
        if line.strip().startswith("Management API:"):
            return "".join(lines)
    raise AssertionError("serve printed no management API line:\n" + "".join(lines))


def _rotate_demo_secret_as_printed(banner: str, var_dir, port: int) -> None:
    """Run the banner's rotate command; the new secret gets a token from the running server."""
    command = next(line for line in banner.splitlines() if "rotate-secret" in line).split("python ", 1)[1]
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "SQLITE_PATH"}}
    env["A2A_VAR_DIR"] = str(var_dir)
    done = subprocess.run(
        f"{sys.executable} {command}",
        shell=True,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    credentials = json.loads(done.stdout)
    token = httpx.post(
        f"http://127.0.0.1:{port}/o/token/",
        data={"grant_type": "client_credentials", "scope": "a2a:invoke"},
        auth=(credentials["client_id"], credentials["client_secret"]),
    )
    assert token.status_code == 200, token.text
    assert token.json()["access_token"]


def _wait_ready(port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise AssertionError("server never became ready")


def test_serve_prints_a_curl_that_works_and_a_second_start_keeps_the_data(tmp_path):
    port = free_port()
    first = _serve(tmp_path, port)
    try:
        banner = _banner(first)
        _wait_ready(port)
        assert f"http://127.0.0.1:{port}/a2a/demo/echo/.well-known/agent-card.json" in banner.replace(
            "  (card: .well-known/agent-card.json)", ".well-known/agent-card.json"
        )
        assert re.search(r"password: \S+", banner)
        # The gRPC binding's second port, as the cards name it.
        assert re.search(r"  gRPC: +127\.0\.0\.1:\d+ ", banner), banner
        curl = next(line.strip() for line in banner.splitlines() if line.strip().startswith("curl "))
        task_ids = []
        # Twice as printed (the same messageId both times): each run is a new message and a new task.
        for _ in range(2):
            answer = subprocess.run(["bash", "-c", curl], capture_output=True, text=True, timeout=60).stdout
            task = json.loads(answer)["result"]["task"]
            assert task["status"]["state"] == "TASK_STATE_COMPLETED", answer
            echoed = task["artifacts"][0]["parts"][0]["text"]
            assert echoed == "Hello, World! I have received your request (hi)"
            task_ids.append(task["id"])
        assert task_ids[0] != task_ids[1]
        # The seeded proxy fronts this server's own echo agent: it works out of the box
        # (loopback is allowed in debug mode, the embedded default, with no setting).
        proxied = httpx.post(
            f"http://127.0.0.1:{port}/a2a/demo/a2a-proxy/",
            json={
                "jsonrpc": "2.0",
                "id": "req-2",
                "method": "SendMessage",
                "params": {
                    "message": {"role": "ROLE_USER", "messageId": "msg-p", "parts": [{"text": "via"}]}
                },
            },
            headers={"A2A-Version": "1.0"},
            timeout=60,
        ).json()["result"]["task"]
        assert proxied["status"]["state"] == "TASK_STATE_COMPLETED", proxied
        assert "I have received your request (via)" in json.dumps(proxied)
        health = httpx.get(f"http://127.0.0.1:{port}/healthz").json()
        assert health == {"status": "ok"}
        ready = httpx.get(f"http://127.0.0.1:{port}/readyz").json()
        assert ready == {"status": "ok", "database": "ok", "broker": "ok"}
    finally:
        first.terminate()
        first.wait(timeout=15)

    second = _serve(tmp_path, port)
    try:
        banner = _banner(second)
        # No password the second time, but who the admin is and how to get in without it.
        assert not re.search(r"password: \S+", banner), banner
        assert f"Console:     http://127.0.0.1:{port}/console/" in banner
        assert "user 'admin'" in banner
        assert "python manage.py changepassword admin" in banner
        rest = _rest_of_banner(second)
        assert "client_secret shown on the first start only" in rest, rest
        _wait_ready(port)
        _rotate_demo_secret_as_printed(rest, tmp_path, port)
    finally:
        second.terminate()
        second.wait(timeout=15)
    with sqlite3.connect(tmp_path / "db.sqlite3") as db:
        assert db.execute("SELECT count(*) FROM tenants_tenant").fetchone() == (1,)
        assert db.execute("SELECT count(*) FROM agents_agent").fetchone()[0] == len(
            db.execute("SELECT DISTINCT slug FROM agents_agent").fetchall()
        )
        assert db.execute("SELECT count(*) FROM auth_user").fetchone() == (1,)
        # The tasks made before the restart are still there: the printed curl's two, and the
        # proxy's with the echo task it forwarded to.
        assert db.execute("SELECT count(*) FROM tasks_app_task").fetchone() == (4,)


def test_banner_names_the_real_database_and_worker_and_lines_up_the_agents(db_settings, tmp_path):
    """`serve` on this session's database (PostgreSQL in services mode) without REDIS_URL."""
    process = _serve(tmp_path, free_port(), database_env(db_settings))
    try:
        banner = _banner(process)
    finally:
        process.terminate()
        process.wait(timeout=15)
    lines = banner.splitlines()
    database = next(line for line in lines if line.startswith("  Database:"))
    workers = next(line for line in lines if line.startswith("  Workers:"))
    serving = next(line for line in lines if line.startswith("A2A platform serving on"))
    if db_settings["ENGINE"].endswith("postgresql"):
        assert f"PostgreSQL database {db_settings['NAME']} on " in database, banner
        assert "SQLite" not in banner and "embedded" not in serving, banner
    else:
        assert database.endswith(f"SQLite {db_settings['NAME']}"), banner
        assert serving.endswith("(embedded default)"), banner
    assert "worker threads in this process" in workers and "no REDIS_URL" in workers, banner
    agents = [line for line in banner.splitlines() if line.startswith("  Agent ")]
    assert len(agents) >= 6
    columns = {line.index("http://") for line in agents}
    assert len(columns) == 1, "\n".join(agents)
    for line in agents:
        assert re.match(r"  Agent [a-z0-9-]+: +http://", line), line


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_banner_descriptions_of_each_deployment():
    from django.test import override_settings

    from a2a_platform.management.commands.serve import database_description, worker_description

    postgres = {"ENGINE": "django.db.backends.postgresql", "NAME": "a2a", "HOST": "db.internal", "PORT": 5432}
    postgres["USER"], postgres["PASSWORD"] = "app", "s3cret"
    sqlite = {"ENGINE": "django.db.backends.sqlite3", "NAME": "/srv/var/db.sqlite3"}
    with override_settings(DATABASES={"default": postgres}):
        assert database_description() == "PostgreSQL database a2a on db.internal:5432"
    with override_settings(DATABASES={"default": sqlite}):
        assert database_description() == "SQLite /srv/var/db.sqlite3"
    with override_settings(EMBEDDED_WORKER=False, REDIS_URL="redis://:hunter2@cache.internal:6380/1"):
        assert worker_description() == (
            "separate Celery workers; broker and channel layer on Redis at cache.internal:6380"
        )
    embedded = {"EMBEDDED_WORKER_THREADS": 8, "EMBEDDED_CONTROL_THREADS": 2}
    with override_settings(EMBEDDED_WORKER=True, REDIS_URL="", **embedded):
        assert worker_description() == (
            "8 worker threads in this process for turns and 2 for webhooks and cancels;"
            " in-process job queue and channel layer (no REDIS_URL)"
        )
