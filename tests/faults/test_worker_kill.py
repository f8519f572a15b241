"""kill -9 the Celery worker in the middle of progress turns; a new worker finishes them all.

Each of 20 rounds sends three tasks to a 3 s progress agent (two with
returnImmediately, one blocking SendMessage), waits until every one has
streamed an artifact chunk, kills the worker, starts a new one and waits for
the three to complete. The lease is shortened (5 s, renewed every second) so
20 rounds fit in about 3.5 minutes; a lost turn must still resume within 15 s
of the new worker being ready.
"""

import os
import threading
import time
import uuid
from dataclasses import dataclass, field

import pytest

from tests.faults.harness import (
    FINAL_STATES,
    TERMINAL,
    artifact_texts,
    client_duplicates,
    expected_chunks,
    get_task,
    log_holes,
    payload_state,
    payload_text,
    record,
    rpc,
    send_params,
    wait_for,
)

pytestmark = pytest.mark.skipif(
    not os.environ.get("REDIS_URL"), reason="fault tests run with the services-mode suite (REDIS_URL set)"
)

ROUNDS = 20
TASKS_PER_ROUND = 3
RESUME_LIMIT = 15.0
DURATION = 3.0
LEASE_ENV = {
    "A2A_TURN_LEASE": "5",
    "A2A_TURN_HEARTBEAT": "1",
    "A2A_SWEEP_INTERVAL": "1",
    "A2A_TURN_REDISPATCH_AFTER": "3",
    "A2A_BLOCKING_TIMEOUT": "25",
}


@dataclass
class Round:
    """What one kill did to its tasks."""

    texts: dict[str, str] = field(default_factory=dict)  # task id -> the text it was sent
    blocking: dict | None = None  # the blocking SendMessage's answer (its task)
    interrupted: int = 0
    resume_times: list[float] = field(default_factory=list)
    all_completed: bool = False
    problems: list[str] = field(default_factory=list)


def call_blocking(url: str, text: str, message_id: str, into: dict) -> None:
    into["answer"] = rpc(url, "SendMessage", send_params(text, message_id))


def kill_round(stack, url: str, round_no: int, worker):
    """Send the round's tasks, kill the worker mid-turn, start a new one; returns (new worker, Round)."""
    result = Round()
    message_ids = [f"kill-{round_no}-{k}-{uuid.uuid4()}" for k in range(TASKS_PER_ROUND)]
    sent = {mid: f"job {round_no}.{k}" for k, mid in enumerate(message_ids)}
    for mid in message_ids[1:]:
        answer = rpc(url, "SendMessage", send_params(sent[mid], mid, return_immediately=True))
        assert answer.task, f"round {round_no}: SendMessage refused: {answer}"
    blocking: dict = {}
    caller = threading.Thread(
        target=call_blocking, args=(url, sent[message_ids[0]], message_ids[0], blocking), daemon=True
    )
    caller.start()

    def mid_turn() -> bool:
        stored = stack.store.tasks_of_messages(message_ids)
        if len(stored) < TASKS_PER_ROUND:
            return False
        logs = stack.store.logs(stored.values())
        return all(any("artifactUpdate" in event.payload for event in log) for log in logs.values())

    assert wait_for(mid_turn, 30, interval=0.05), f"round {round_no}: the turns never got to a chunk"
    stack.kill(worker)
    stored = stack.store.tasks_of_messages(message_ids)
    result.texts = {task_id: sent[mid] for mid, task_id in stored.items()}
    task_ids = list(stored.values())
    # Read after the kill: the dead worker can append nothing more.
    before = stack.store.logs(task_ids)
    open_at_kill = [t for t in task_ids if payload_state(before[t][-1].payload) not in FINAL_STATES]
    result.interrupted = len(open_at_kill)

    worker = stack.start_worker(f"worker-{round_no + 1}")
    ready_at = time.time()
    wait_for(
        lambda: all(state in TERMINAL for state in stack.store.states(task_ids).values()),
        RESUME_LIMIT + DURATION + 12,
    )
    result.all_completed = set(stack.store.states(task_ids).values()) == {"completed"}
    caller.join(timeout=30)
    result.blocking = blocking["answer"].task if "answer" in blocking else None

    after = stack.store.logs(task_ids)
    for task_id in open_at_kill:
        old, new = before[task_id], after[task_id]
        if [event.payload for event in new[: len(old)]] != [event.payload for event in old]:
            result.problems.append(f"{task_id}: the log before the kill was rewritten")
        added = new[len(old) :]
        if not added:
            continue  # never resumed: lost
        result.resume_times.append(max(0.0, added[0].created_at - ready_at))
        first = added[0].payload
        if payload_state(first) != "TASK_STATE_WORKING" or "restarted" not in payload_text(first).lower():
            result.problems.append(
                f"{task_id}: the re-run did not start with a WORKING 'restarted' status: {first}"
            )
    return worker, result


def test_turns_of_a_killed_worker_resume_on_a_new_one_and_complete_once(stack):
    started = time.monotonic()
    stack.env.update(LEASE_ENV)
    web = stack.start_web()
    stack.start_beat()
    worker = stack.start_worker("worker-0")
    url = web.agent_url("fault-progress")
    rounds: list[Round] = []
    for round_no in range(ROUNDS):
        worker, result = kill_round(stack, url, round_no, worker)
        rounds.append(result)
        if not result.all_completed:
            break  # the platform lost or failed them: more rounds would only go the same way

    texts = {task_id: text for result in rounds for task_id, text in result.texts.items()}
    states = stack.store.states(texts)
    logs = stack.store.logs(texts)
    event_seqs = stack.store.event_seqs(texts)
    duplicated = gaps = wrong_artifacts = 0
    for task_id, text in texts.items():
        gaps += log_holes(logs[task_id], event_seqs[task_id])
        if states[task_id] == "completed":
            task = get_task(url, task_id)
            duplicated += client_duplicates(task)
            wrong_artifacts += artifact_texts(task) != expected_chunks(text)
    resume_times = [seconds for result in rounds for seconds in result.resume_times]
    problems = [problem for result in rounds for problem in result.problems]
    figures = record(
        "worker_kill",
        started,
        kills=len(rounds),
        submitted=len(texts),
        interrupted=sum(result.interrupted for result in rounds),
        completed=sum(1 for state in states.values() if state == "completed"),
        failed=sum(1 for state in states.values() if state in TERMINAL and state != "completed"),
        lost=sum(1 for state in states.values() if state not in TERMINAL),
        duplicated=duplicated,
        gaps=gaps,
        wrong_artifacts=wrong_artifacts,
        blocking_not_completed=sum(
            1 for r in rounds if not r.blocking or r.blocking["status"]["state"] != "TASK_STATE_COMPLETED"
        ),
        worst_resume_s=round(max(resume_times), 1) if resume_times else None,
        resumed_late=sum(1 for seconds in resume_times if seconds > RESUME_LIMIT),
        processes_exited=stack.exited(),
    )
    assert figures["kills"] == ROUNDS, f"stopped after round {len(rounds)}: its tasks did not all complete"
    assert figures["completed"] == ROUNDS * TASKS_PER_ROUND
    assert figures["interrupted"] > 0
    assert (figures["duplicated"], figures["gaps"], figures["wrong_artifacts"]) == (0, 0, 0)
    assert figures["resumed_late"] == 0, f"worst resume {figures['worst_resume_s']} s"
    assert figures["blocking_not_completed"] == 0, "a blocking SendMessage did not answer the completed task"
    assert not problems, "\n".join(problems[:10])
    assert figures["processes_exited"] == []
