"""A database outage longer than a turn's lease: the turn stops before it is run again, never beside it.

While the database is away, the worker cannot renew the lease of the turn it
runs; once the lease lapses, the sweeper may give the turn to another worker.
The worker gives the turn up just before (tasks_app/turns/run.py, UNRENEWED),
so the agent's first execution has stopped when the second starts. The agent
here notes in a file when each of its executions starts and stops.
"""

import json
import os
import sys
import time
import uuid

import pytest

from tests.faults.harness import record, rpc, send_params, wait_for
from tests.live import ROOT, child_env, run_checked

pytestmark = pytest.mark.skipif(
    not os.environ.get("REDIS_URL"), reason="fault tests run with the services-mode suite (REDIS_URL set)"
)

LEASE = 3.0
LEASE_ENV = {"A2A_TURN_LEASE": str(LEASE), "A2A_TURN_HEARTBEAT": "0.5", "A2A_SWEEP_INTERVAL": "0.5"}
# Longer than the lease, so the sweeper runs the turn again once the database is back.
OUTAGE = 3 * LEASE
# The agent works longer than the outage: left running, it would still work when the second execution starts.
WORKS_FOR = OUTAGE + 4.0


def _journal(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _executions(notes: list[dict]) -> list[tuple[float, float | None, str]]:
    """(start, end or None while it runs, how it ended) of each execution, by start."""
    spans: dict[str, list] = {}
    for note in notes:
        span = spans.setdefault(note["execution"], [None, None, "running"])
        if note["event"] == "start":
            span[0] = note["at"]
        else:
            span[1], span[2] = note["at"], note["event"]
    return sorted(tuple(span) for span in spans.values())


def test_a_turn_whose_lease_the_database_cannot_renew_stops_before_it_runs_again(stack, tmp_path):
    started = time.monotonic()
    journal = tmp_path / "journal.jsonl"
    config = json.dumps({"seconds": WORKS_FOR, "journal": str(journal)})
    create = ["agent", "create", "--tenant", "demo", "--slug", "fault-journal", "--handler", "journal"]
    env = child_env(stack.settings(), {"REDIS_URL": ""})
    run_checked([sys.executable, "manage.py", *create, "--config", config], "agent create", cwd=ROOT, env=env)
    stack.env.update(LEASE_ENV)
    web = stack.start_web()
    stack.start_worker()
    stack.start_beat()

    answer = rpc(
        web.agent_url("fault-journal"),
        "SendMessage",
        send_params("work", f"lease-{uuid.uuid4()}", return_immediately=True),
    )
    assert answer.task, answer
    task_id = answer.task["id"]
    assert wait_for(lambda: _journal(journal), 15.0), "the agent never started"
    # Past the first renewals: the lease is the watcher's own by now, not the claim's.
    time.sleep(1.0)
    down_at = time.time()
    stack.cluster.stop("fast")
    time.sleep(OUTAGE)
    stack.cluster.start()
    restored_at = time.time()

    done = wait_for(lambda: stack.store.states([task_id]).get(task_id) == "completed", 60.0, interval=0.5)
    executions = _executions([note for note in _journal(journal) if note["task"] == task_id])
    figures = record(
        "lease_lapse",
        started,
        outage_s=OUTAGE,
        lease_s=LEASE,
        executions=len(executions),
        restored_after_s=round(restored_at - down_at, 2),
        # Each execution's start and end (None: never noted), in seconds from the outage's start.
        executions_s=[
            [round(start - down_at, 2), end and round(end - down_at, 2), how]
            for start, end, how in executions
        ],
        processes_exited=stack.exited(),
    )
    assert done, f"task {task_id} did not complete: {stack.store.states([task_id])}"
    assert figures["processes_exited"] == [], "a process ended during the outage"
    assert len(executions) >= 2, f"the turn was not run again after its lease lapsed: {executions}"
    _, first_end, first_outcome = executions[0]
    assert first_outcome == "stop", f"the first execution was not stopped: {figures['executions_s']}"
    # Given up within the lease (plus the stop), long before the database came back.
    assert first_end < down_at + LEASE + 1.0 < restored_at, figures["executions_s"]
    for (_, end, _), (next_start, _, _) in zip(executions, executions[1:], strict=False):
        assert end is not None and end <= next_start, f"two executions overlapped: {figures['executions_s']}"
    assert executions[-1][2] == "end", figures["executions_s"]
