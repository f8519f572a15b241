"""Fixtures of the fault tests: a PostgreSQL cluster of their own, a Redis and processes per test.

The cluster is made once per session (initdb, migrate, seed: about 20 s) and
each test gets a fresh database copied from its template, so a test that
breaks its platform leaves nothing for the next one. Whatever happens, the
finalizers stop every process a test started and the cluster is removed.
"""

import itertools
import json
import logging
import os
import re
import signal
import sys
from pathlib import Path

import psycopg
import pytest

from tests.faults.harness import Stack
from tests.live import ROOT, PostgresCluster, RedisServer, child_env, run_checked

TEMPLATE = "faults_template"
# Agents of the faults session's own: slug -> (handler, config).
AGENTS = {
    "fault-progress": ("progress", {"duration": 3.0}),
    "fault-short": ("progress", {"duration": 1.5}),
    "fault-ticker": ("ticker", {"seconds": 20}),
    # Holds its loop with time.sleep, as a synchronous model client would.
    "fault-blocker": ("sleeper", {"seconds": 5, "blocking": True}),
    # Waits without holding its loop: its watcher renews the lease every heartbeat.
    "fault-sleeper": ("sleeper", {"seconds": 12}),
    "fault-hold": ("sleeper", {"seconds": 8}),
    "fault-nap": ("sleeper", {"seconds": 1}),
}
LOG_TAIL_LINES = 60
LOGS_SHOWN = 6

_databases = itertools.count(1)
# One line per request would bury the figures the tests print.
logging.getLogger("httpx").setLevel(logging.WARNING)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing fault test's report carries the tails of its newest server logs."""
    report = yield
    stack = getattr(item, "funcargs", {}).get("stack")
    if report.failed and call.when == "call" and isinstance(stack, Stack):
        logs = sorted(stack.log_dir.glob("*.log"), key=lambda log: log.stat().st_mtime)[-LOGS_SHOWN:]
        for log in logs:
            lines = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
            report.sections.append((f"fault log {log.name} (last {len(lines)} lines)", "\n".join(lines)))
    return report


@pytest.fixture(scope="session")
def faults_log_dir(log_dir) -> Path:
    path = log_dir / "faults"
    path.mkdir(parents=True, exist_ok=True)
    return path


def admin_sql(cluster: PostgresCluster, sql: str) -> None:
    with psycopg.connect(cluster.url("postgres"), autocommit=True, connect_timeout=10) as connection:
        connection.execute(sql)


def interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture(scope="session")
def fault_cluster(faults_log_dir):
    """A migrated, seeded template database in a throwaway cluster on a free port."""
    PostgresCluster.remove_stale()
    # A session stopped with SIGTERM (a CI timeout, `timeout`) still runs the finalizers
    # below: pytest tears fixtures down on KeyboardInterrupt. Children die with the
    # session anyway (tests/live.py spawn); the cluster, a daemon, would not.
    previous = signal.signal(signal.SIGTERM, interrupt)
    cluster = PostgresCluster(faults_log_dir)
    try:
        cluster.initdb()
        cluster.start()
        admin_sql(cluster, f"CREATE DATABASE {TEMPLATE}")
        # REDIS_URL empty: these commands need no Redis, and must never touch the shared one.
        env = child_env(cluster.settings(TEMPLATE), {"REDIS_URL": ""})
        manage = [sys.executable, "manage.py"]
        run_checked([*manage, "migrate", "--noinput", "-v", "0"], "migrate", cwd=ROOT, env=env)
        run_checked([*manage, "seed_demo"], "seed_demo", cwd=ROOT, env=env)
        for slug, (handler, config) in AGENTS.items():
            args = ["agent", "create", "--tenant", "demo", "--slug", slug, "--handler", handler]
            args += ["--config", json.dumps(config)]
            run_checked([*manage, *args], f"agent create {slug}", cwd=ROOT, env=env)
        yield cluster
    finally:
        cluster.destroy()
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture
def stack(request, fault_cluster, faults_log_dir):
    """A Redis, a database and (as the test starts them) platform processes of this test's own."""
    name = re.sub(r"[^A-Za-z0-9_-]", "_", request.node.name)[:60]
    log_dir = faults_log_dir / name
    log_dir.mkdir(parents=True, exist_ok=True)
    database = f"faults_{os.getpid()}_{next(_databases)}"
    admin_sql(fault_cluster, f"CREATE DATABASE {database} TEMPLATE {TEMPLATE}")
    stack = Stack(cluster=fault_cluster, database=database, redis=RedisServer(log_dir), log_dir=log_dir)
    try:
        stack.redis.start()
        yield stack
    finally:
        try:
            stack.stop()
            stack.redis.stop()
        finally:
            # A test that stopped the cluster and failed before starting it again.
            if not fault_cluster.is_running():
                fault_cluster.start()
            admin_sql(fault_cluster, f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
