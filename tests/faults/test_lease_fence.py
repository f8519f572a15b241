"""A worker cut off from PostgreSQL for longer than a turn's lease stops its agent before the lease lapses.

The database is the record of who runs a turn: once a lease lapses, the
sweeper hands the turn to another worker. A worker that cannot renew the
lease (the database is down, or out of its reach) must stop its agent first,
or two executions of one turn would work at the same time once the database
is back. The lease checks in every write keep a stopped worker's events out
of the task; what the agent does outside the platform only the fence stops.

The agent here ticks into a file ten times a second (tests/handlers.py,
TickerExecutor) and reports a WORKING status every half second, so it writes
to the database through the outage too. The lease and the heartbeat keep
their defaults (10 s, renewed every 2 s), and so does the workers' wait for a
database connection (DB_POOL_TIMEOUT, 10 s), which holds the turn's loop.
"""

import os
import time
import uuid
from collections import defaultdict

import pytest

from tests.faults.harness import payload_state, payload_text, record, rpc, send_params, wait_for

pytestmark = pytest.mark.skipif(
    not os.environ.get("REDIS_URL"), reason="fault tests run with the services-mode suite (REDIS_URL set)"
)

LEASE = 10.0  # A2A_TURN_LEASE's default
OUTAGE = LEASE + 3.0
TICKER_SECONDS = 20.0  # the fault-ticker agent's (conftest.py)


def ticks_by_execution(path, task_id: str) -> dict[str, list[float]]:
    """The times each execution of the task's turn ticked, by execution, in the order they started."""
    ticks: dict[str, list[float]] = defaultdict(list)
    for line in path.read_text().splitlines():
        task, execution, at = line.split()
        if task == task_id:
            ticks[execution].append(float(at))
    return dict(sorted(ticks.items(), key=lambda item: item[1][0]))


def test_a_worker_cut_off_from_the_database_stops_its_agent_before_another_runs_the_turn(stack):
    started = time.monotonic()
    ticks = stack.log_dir / "ticks.txt"
    ticks.write_text("")
    stack.env.update({"A2A_TEST_TICKS": str(ticks), "A2A_SWEEP_INTERVAL": "1", "A2A_BLOCKING_TIMEOUT": "30"})
    web = stack.start_web()
    stack.start_beat()
    # Two workers: the turn runs again on whichever takes it once the database is back.
    stack.start_worker("worker-a")
    stack.start_worker("worker-b")
    url = web.agent_url("fault-ticker")
    answer = rpc(url, "SendMessage", send_params("tick", f"fence-{uuid.uuid4()}", return_immediately=True))
    assert answer.task, f"SendMessage refused: {answer}"
    task_id = answer.task["id"]
    # Past a renewal or two: the lease is the watcher's, not only the claim's.
    ticked = wait_for(lambda: any(len(t) >= 30 for t in ticks_by_execution(ticks, task_id).values()), 30)
    assert ticked, "the agent never got going"

    down_at = time.time()
    stack.cluster.stop("fast")
    time.sleep(OUTAGE)
    stack.cluster.start()
    restored_at = time.time()

    completed = wait_for(
        lambda: stack.store.states([task_id]).get(task_id) == "completed", TICKER_SECONDS + 40, interval=0.5
    )
    executions = ticks_by_execution(ticks, task_id)
    spans = [(min(times), max(times)) for times in executions.values()]
    first_end = spans[0][1]
    overlaps = [
        (round(a_end - b_start, 2))
        for (_, a_end), (b_start, _) in zip(spans, spans[1:], strict=False)
        if b_start <= a_end
    ]
    log = stack.store.logs([task_id])[task_id]
    restarted = [
        event
        for event in log
        if payload_state(event.payload) == "TASK_STATE_WORKING" and "restarted" in payload_text(event.payload)
    ]
    figures = record(
        "lease_fence",
        started,
        executions=len(executions),
        first_stopped_after_outage_s=round(first_end - down_at, 2),
        second_started_after_restore_s=round(spans[1][0] - restored_at, 2) if len(spans) > 1 else None,
        overlaps_s=overlaps,
        completed=completed,
        processes_exited=stack.exited(),
    )
    assert completed, f"the task did not complete after the outage: {stack.store.states([task_id])}"
    assert len(executions) >= 2, f"the turn was never run again after its lease lapsed: {figures}"
    # The lease the first execution held was renewed at the latest when the database went away.
    assert first_end < down_at + LEASE, f"the cut-off execution went on past its lease: {figures}"
    assert not overlaps, f"two executions of one turn ran at the same time: {figures}"
    assert restarted, "the run after the outage did not log its WORKING 'restarted' status"
    assert figures["processes_exited"] == [], figures


def test_an_agent_that_blocks_its_loop_on_a_healthy_database_runs_once(stack):
    # The agent sleeps 5 s holding its loop (and its watcher) under a 2 s lease: the worker's
    # lease keeper renews the lease from its own thread, so the fence does not stop the agent
    # as it comes back and the sweeper does not give the turn to the other worker meanwhile.
    started = time.monotonic()
    stack.env.update({"A2A_TURN_LEASE": "2", "A2A_TURN_HEARTBEAT": "0.5", "A2A_SWEEP_INTERVAL": "0.5"})
    web = stack.start_web()
    stack.start_beat()
    stack.start_worker("worker-a")
    stack.start_worker("worker-b")
    params = send_params("hold on", f"block-{uuid.uuid4()}")
    answer = rpc(web.agent_url("fault-blocker"), "SendMessage", params)
    assert answer.task, f"SendMessage refused: {answer}"
    task_id = answer.task["id"]
    log = stack.store.logs([task_id])[task_id]
    restarts = [event for event in log if "restarted" in payload_text(event.payload)]
    worker_logs = stack.log_dir.glob("worker-*.log")
    kept = [path.name for path in worker_logs if "its lease is kept meanwhile" in path.read_text()]
    figures = record(
        "blocked_loop",
        started,
        state=answer.task["status"]["state"],
        restarts=len(restarts),
        kept_by=kept,
        processes_exited=stack.exited(),
    )
    assert answer.task["status"]["state"] == "TASK_STATE_COMPLETED", figures
    assert restarts == [], f"the turn of a blocked agent was run again: {figures}"
    assert len(kept) == 1, f"no keeper renewed the blocked turn's lease (or two did): {figures}"
    assert figures["processes_exited"] == [], figures
