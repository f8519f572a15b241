"""Redis stops for 7 s while clients send work: no process exits, nothing accepted is lost.

The test's own redis-server (never the shared one) is stopped while blocking
SendMessage, SendStreamingMessage and REST message:send callers keep sending
to a 1.5 s progress agent, then started again on the same port, empty, as after
a crash. Every call must get a clear error (HTTP 503, a JSON-RPC error other
than -32603) with nothing stored, or a task that completes; every accepted
stream must end with its task's whole log.
"""

import os
import time

import pytest

from tests.faults.harness import Load, outage_figures, record

pytestmark = pytest.mark.skipif(
    not os.environ.get("REDIS_URL"), reason="fault tests run with the services-mode suite (REDIS_URL set)"
)

OUTAGE = 7.0
OUTAGE_ENV = {"A2A_BLOCKING_TIMEOUT": "20", "A2A_SSE_HEARTBEAT": "2"}


def test_a_redis_outage_ends_no_process_and_loses_no_accepted_task(stack):
    started = time.monotonic()
    stack.env.update(OUTAGE_ENV)
    web = stack.start_web()
    stack.start_worker()
    stack.start_beat()
    load = Load(web, "fault-short")
    load.start()
    try:
        time.sleep(3)  # work in every stage when Redis goes: queued, running, streaming
        down_at = time.time()
        stack.redis.stop()
        time.sleep(OUTAGE)
        stack.redis.start()
        restored_at = time.time()
        time.sleep(4)  # and new work right after it came back
    finally:
        load.stop()
    figures = record(
        "redis_outage", started, outage_s=OUTAGE, **outage_figures(stack, load, down_at, restored_at)
    )
    assert figures["in_flight_during_outage"] > 0
    assert figures["processes_exited"] == [], "a process ended during the Redis outage"
    assert figures["internal_errors"] == 0, "accepted or refused work was answered -32603 / HTTP 500"
    assert figures["error_but_stored"] == 0, "a call answered with an error had its task stored"
    assert (figures["lost"], figures["failed"]) == (0, 0)
    assert figures["completed"] == figures["submitted"] - figures["clear_errors"]
    assert (figures["broken_streams"], figures["duplicated"], figures["gaps"]) == (0, 0, 0)
