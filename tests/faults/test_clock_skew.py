"""A worker whose clock is off from the database's keeps its leases as long as one whose clock is right.

The sweeper runs on whichever worker Celery gives it to. Were a lease's end
written on the clock of the worker that holds it and compared with the clock
of the worker that sweeps, a holder whose clock is behind by more than a
lease would see its turn given to another worker while it runs (two
executions), and the turn of a dead holder whose clock is ahead would wait
that much longer to run again. Leases are written and compared on the
database's clock (tasks_app/turns/lease.py), so neither happens.

The skewed worker is a real Celery worker process whose Django clock
(django.utils.timezone.now, which the platform reads) is moved by a
sitecustomize of the test's own; Celery's and the kernel's clocks are left
alone. Lease 2 s, heartbeat 0.5 s, a sweep every 0.5 s.
"""

import os
import time
import uuid

import pytest

from tests.faults.harness import Stack, payload_state, payload_text, record, rpc, send_params, wait_for

pytestmark = pytest.mark.skipif(
    not os.environ.get("REDIS_URL"), reason="fault tests run with the services-mode suite (REDIS_URL set)"
)

LEASE = 2.0
SLEEPER_SECONDS = 5.0  # the fault-sleeper agent's (conftest.py)
SKEWED_CLOCK = """\
import os
import sys

from datetime import timedelta

from django.utils import timezone

_skew = timedelta(seconds=float(os.environ["A2A_TEST_CLOCK_SKEW"]))
_now = timezone.now
timezone.now = lambda: _now() + _skew
print(f"clock skewed by {_skew.total_seconds():+.1f} s", file=sys.stderr, flush=True)
"""


def start_skewed_worker(stack: Stack, name: str, seconds: float):
    """A Celery worker whose Django clock is `seconds` off; the stack's other processes keep theirs."""
    site = stack.log_dir / f"{name}-site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SKEWED_CLOCK)
    saved = dict(stack.env)
    stack.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    stack.env["A2A_TEST_CLOCK_SKEW"] = str(seconds)
    try:
        worker = stack.start_worker(name)
    finally:
        stack.env.clear()
        stack.env.update(saved)
    assert f"clock skewed by {seconds:+.1f} s" in worker.output(), "the worker's clock was not moved"
    return worker


def start_turn(stack: Stack, web, label: str) -> str:
    """A fault-sleeper turn, answered at once; returns when the agent reported WORKING."""
    params = send_params("sleep", f"{label}-{uuid.uuid4()}", return_immediately=True)
    answer = rpc(web.agent_url("fault-sleeper"), "SendMessage", params)
    assert answer.task, f"SendMessage refused: {answer}"
    task_id = answer.task["id"]
    working = wait_for(lambda: len(stack.store.logs([task_id])[task_id]) >= 2, 20)
    assert working, "the skewed worker never started the turn"
    return task_id


def attempts_of(stack: Stack, task_id: str) -> int:
    rows = stack.store.rows(
        "SELECT turn_attempts FROM tasks_app_message WHERE task_id = %s::uuid AND role = 'user'", (task_id,)
    )
    return rows[0][0]


def test_a_worker_whose_clock_is_behind_runs_its_turn_once(stack):
    started = time.monotonic()
    stack.env.update({"A2A_TURN_LEASE": str(LEASE), "A2A_TURN_HEARTBEAT": "0.5", "A2A_SWEEP_INTERVAL": "0.5"})
    web = stack.start_web()
    stack.start_beat()
    # Three leases behind: each lease it writes would have ended before it was written.
    start_skewed_worker(stack, "worker-behind", -3 * LEASE)
    task_id = start_turn(stack, web, "behind")
    # From here on sweeps run on either worker, the one with the right clock too.
    stack.start_worker("worker-right")
    completed = wait_for(
        lambda: stack.store.states([task_id]).get(task_id) == "completed", SLEEPER_SECONDS + 20, interval=0.3
    )
    log = stack.store.logs([task_id])[task_id]
    restarts = [event for event in log if "restarted" in payload_text(event.payload)]
    workings = [event for event in log if payload_state(event.payload) == "TASK_STATE_WORKING"]
    figures = record(
        "clock_behind",
        started,
        completed=completed,
        attempts=attempts_of(stack, task_id),
        restarts=len(restarts),
        working_events=len(workings),
        processes_exited=stack.exited(),
    )
    assert completed, f"the task did not complete: {figures}"
    assert figures["attempts"] == 1 and restarts == [], f"the turn was given to another worker: {figures}"
    assert figures["processes_exited"] == [], figures


def test_the_turn_of_a_dead_worker_whose_clock_was_ahead_runs_again_a_lease_later(stack):
    started = time.monotonic()
    stack.env.update({"A2A_TURN_LEASE": str(LEASE), "A2A_TURN_HEARTBEAT": "0.5", "A2A_SWEEP_INTERVAL": "0.5"})
    web = stack.start_web()
    stack.start_beat()
    ahead = start_skewed_worker(stack, "worker-ahead", 30.0)
    task_id = start_turn(stack, web, "ahead")
    stack.start_worker("worker-right")
    killed_at = stack.kill(ahead)
    # The lease lapses at most a lease after the kill; the next sweep, on the worker left, runs it again.
    completed = wait_for(
        lambda: stack.store.states([task_id]).get(task_id) == "completed",
        LEASE + SLEEPER_SECONDS + 10,
        interval=0.3,
    )
    log = stack.store.logs([task_id])[task_id]
    restarts = [event for event in log if "restarted" in payload_text(event.payload)]
    figures = record(
        "clock_ahead",
        started,
        completed=completed,
        attempts=attempts_of(stack, task_id),
        resumed_after_kill_s=round(restarts[0].created_at - killed_at, 2) if restarts else None,
        processes_exited=stack.exited(),
    )
    assert completed, f"the turn of the dead worker was not run again in time: {figures}"
    assert figures["attempts"] == 2 and len(restarts) == 1, figures
    assert figures["resumed_after_kill_s"] < LEASE + 3, figures
    assert figures["processes_exited"] == [], figures
