"""PostgreSQL restarts (pg_ctl stop -m fast, 6 s down, start) under load: the Redis test's rules.

The cluster is the faults session's own, on a port of its own; the shared
database server is never touched. Before a task is stored, an outage must be
a clear error naming the database (HTTP 503 on REST); after, the task must
complete, and accepted streams must carry its whole log.
"""

import os
import time

import pytest

from tests.faults.harness import Load, outage_figures, record, wait_for

pytestmark = pytest.mark.skipif(
    not os.environ.get("REDIS_URL"), reason="fault tests run with the services-mode suite (REDIS_URL set)"
)

OUTAGE = 6.0
OUTAGE_ENV = {"A2A_BLOCKING_TIMEOUT": "20", "A2A_SSE_HEARTBEAT": "2"}
# The web waits this long for a database connection, then refuses (503): well within the
# outage, so the probes sent during it meet the refusal paths of every binding the load uses.
WEB_ENV = {"DB_POOL_TIMEOUT": "2"}
PROBE_AFTER = 1.0
RUNNING_TURNS = "SELECT count(*) FROM tasks_app_message WHERE turn = 'running'"


def test_a_postgres_restart_ends_no_process_and_loses_no_accepted_task(stack):
    started = time.monotonic()
    stack.env.update({**OUTAGE_ENV, **WEB_ENV})
    web = stack.start_web()
    for name in WEB_ENV:
        del stack.env[name]
    stack.start_worker()
    stack.start_beat()
    load = Load(web, "fault-short")
    load.start()
    try:
        time.sleep(3)
        # Stop it under a running turn, so the outage meets accepted work, not only new requests.
        wait_for(lambda: stack.store.rows(RUNNING_TURNS)[0][0] > 0, 5.0, interval=0.05)
        down_at = time.time()
        stack.cluster.stop("fast")
        time.sleep(PROBE_AFTER)
        # A call of each kind while the database is down, whatever the load's timing.
        probes = load.probe()
        time.sleep(max(0.0, down_at + OUTAGE - time.time()))
        stack.cluster.start()
        restored_at = time.time()
        time.sleep(4)
    finally:
        load.stop()
    figures = outage_figures(stack, load, down_at, restored_at)
    refused = [call for call in load.calls if call.outcome() == "clear-error"]
    vague = [c.error_text() for c in refused if c.kind != "rest" and "database" not in c.error_text().lower()]
    rest_not_503 = [c for c in refused if c.kind == "rest" and c.answer and c.answer.status != 503]
    figures = record(
        "postgres_restart",
        started,
        outage_s=OUTAGE,
        **figures,
        errors_not_naming_database=len(vague),
        rest_refusals_not_503=len(rest_not_503),
        probes_refused=sum(1 for call in probes if call.outcome() == "clear-error"),
    )
    assert figures["in_flight_during_outage"] > 0
    assert figures["clear_errors"] > 0, "nothing was refused during the outage: no refusal path was met"
    assert figures["processes_exited"] == [], "a process ended during the PostgreSQL restart"
    assert figures["internal_errors"] == 0, "accepted or refused work was answered -32603 / HTTP 500"
    assert figures["error_but_stored"] == 0, "a call answered with an error had its task stored"
    assert (figures["lost"], figures["failed"]) == (0, 0)
    assert figures["completed"] == figures["submitted"] - figures["clear_errors"]
    assert (figures["broken_streams"], figures["duplicated"], figures["gaps"]) == (0, 0, 0)
    assert vague == [], "a JSON-RPC refusal did not say the database is unavailable"
    assert rest_not_503 == [], "a REST refusal was not HTTP 503"
