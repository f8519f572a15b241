"""When every worker thread runs a turn, a dead worker's turn runs again before the backlog.

In services mode the sweeps are jobs on the turns' queue. They used to sit
behind every turn queued before them: once a thread came free it ran the
backlog first, then the sweep, which put the lost turn at the back of the
queue again. Turns now go in behind the other jobs, and a turn run again
ahead of new ones (tasks_app/dispatch.py: kombu's priority steps on Redis).

Two Celery workers of one thread each; lease 2 s, a sweep every 0.5 s. One
worker holds an 8 s turn; the other runs a 3 s progress turn and is killed
with four 1 s turns queued behind them. The lost turn's lease lapses while
the remaining thread is still busy; when it comes free, the lost turn must
start before any of the four.
"""

import os
import time
import uuid

import pytest

from tests.faults.harness import Stack, record, rpc, send_params, wait_for

pytestmark = pytest.mark.skipif(
    not os.environ.get("REDIS_URL"), reason="fault tests run with the services-mode suite (REDIS_URL set)"
)

SETTINGS = {"A2A_TURN_LEASE": "2", "A2A_TURN_HEARTBEAT": "0.5", "A2A_SWEEP_INTERVAL": "0.5"}
BACKLOG = 4


def send(web, agent: str, label: str) -> str:
    params = send_params(label, f"{label}-{uuid.uuid4()}", return_immediately=True)
    answer = rpc(web.agent_url(agent), "SendMessage", params)
    assert answer.task, f"SendMessage refused: {answer}"
    return answer.task["id"]


def turns_of(stack: Stack, task_ids: list[str]) -> dict[str, tuple]:
    """task id -> (turn, turn_attempts, turn_started_at as epoch seconds) of its first user message."""
    rows = stack.store.rows(
        "SELECT task_id::text, turn, turn_attempts, EXTRACT(EPOCH FROM turn_started_at)::float"
        " FROM tasks_app_message WHERE task_id = ANY(%s::uuid[]) AND role = 'user'",
        (task_ids,),
    )
    return {task_id: (turn, attempts, started) for task_id, turn, attempts, started in rows}


def running(stack: Stack, task_id: str) -> bool:
    return turns_of(stack, [task_id])[task_id][:2] == ("running", 1)


def test_a_lost_turn_runs_again_before_the_turns_queued_behind_it(stack):
    started = time.monotonic()
    stack.env.update(SETTINGS)
    web = stack.start_web()
    stack.start_beat()
    stack.start_worker("worker-busy", threads=1)
    holder = send(web, "fault-hold", "hold")
    assert wait_for(lambda: running(stack, holder), 20), "the 8 s turn never ran"
    doomed = stack.start_worker("worker-doomed", threads=1)
    victim = send(web, "fault-progress", "victim")
    assert wait_for(lambda: running(stack, victim), 20), "the victim never ran"
    backlog = [send(web, "fault-nap", f"nap-{k}") for k in range(BACKLOG)]
    assert turns_of(stack, [holder])[holder][0] == "running", "the 8 s turn ended before the kill"
    killed_at = stack.kill(doomed)
    everyone = [holder, victim, *backlog]
    drained = wait_for(lambda: set(stack.store.states(everyone).values()) == {"completed"}, 60, interval=0.3)
    turns = turns_of(stack, everyone)
    victim_rerun = turns[victim][2]
    naps_started = sorted(turns[task_id][2] for task_id in backlog)
    figures = record(
        "busy_workers",
        started,
        completed=drained,
        victim_attempts=turns[victim][1],
        rerun_after_kill_s=round(victim_rerun - killed_at, 1),
        first_nap_after_kill_s=round(naps_started[0] - killed_at, 1),
        naps_before_rerun=sum(start < victim_rerun for start in naps_started),
        processes_exited=stack.exited(),
    )
    assert drained, f"not every turn completed: {figures}"
    assert figures["victim_attempts"] == 2, f"the lost turn did not run again once: {figures}"
    # The thread came free after the lease lapsed (else the order says nothing).
    assert turns[holder][2] + 8 > killed_at + 2, figures
    assert figures["naps_before_rerun"] == 0, f"the backlog ran before the lost turn: {figures}"
    assert figures["processes_exited"] == [], figures
