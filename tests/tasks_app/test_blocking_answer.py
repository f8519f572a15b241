"""A blocking follow-up is answered with its own turn's outcome, never an earlier turn's.

An earlier turn's final batch is published after it commits, without waiting:
an agent that blocks its loop, or a slow Redis, can make it late. A client
that learned of that state another way (GetTask, a webhook) and answered at
once had its blocking follow-up waiting when the late batch came, and was
answered with it: the previous turn's INPUT_REQUIRED, without its own message.
"""

import asyncio
import threading
import time
import uuid

import pytest

from agents.models import Agent
from tasks_app.events import Feed, group_name, publish, wait_until_settled
from tasks_app.models import Task
from tenants.models import Tenant
from tests.conftest import SERVICES_MODE, user_message

BEFORE = 4  # the log's last entry before the follow-up was stored


def _batch(seq: int, state: str, turn: int) -> tuple[str, dict]:
    task = {"id": "t", "status": {"state": state}, "metadata": {"turn": turn}}
    return {
        "type": "task.events",
        "events": [[seq, {"statusUpdate": {"status": {"state": state}}}]],
        "task": task,
    }


def test_a_late_batch_of_the_turn_before_is_not_the_answer():
    task_pk = uuid.uuid4()
    group = group_name(task_pk)

    async def scenario() -> dict | None:
        feed = Feed(task_pk)
        assert await feed.join()
        try:
            waiting = asyncio.ensure_future(
                wait_until_settled(task_pk, timeout=10.0, feed=feed, after_seq=BEFORE)
            )
            await asyncio.sleep(0.05)
            # The first turn's INPUT_REQUIRED (the log's entry BEFORE), late; then this message's
            # SUBMITTED (BEFORE + 1) and its turn's COMPLETED.
            await publish([(group, _batch(BEFORE, "TASK_STATE_INPUT_REQUIRED", turn=1))])
            await asyncio.sleep(0.05)
            assert not waiting.done()
            await publish([(group, _batch(BEFORE + 2, "TASK_STATE_COMPLETED", turn=2))])
            return await asyncio.wait_for(waiting, timeout=10.0)
        finally:
            await feed.close()

    answer = asyncio.run(scenario())
    assert answer is not None
    assert answer["task"]["metadata"] == {"turn": 2}
    assert answer["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


@pytest.mark.skipif(not SERVICES_MODE, reason="the test publishes on the server's channel layer (Redis)")
def test_a_blocking_follow_up_to_the_server_is_answered_by_its_own_turn(rpc, stored, tmp_path):
    # The same, through the server: the late batch is published on the task's group while the
    # follow-up's turn waits for its gate. The follow-up is sent twice with one Idempotency-Key:
    # the repeat stores nothing, and waits for the original's turn from where it stood in the log.
    Agent.objects.update_or_create(
        tenant=Tenant.objects.get(slug="demo"),
        slug="ask-then-gate",
        defaults={"name": "ask-then-gate", "handler": "ask-then-gate", "visibility": Agent.Visibility.PUBLIC},
    )
    asked = rpc("SendMessage", user_message("start", f"ask-{uuid.uuid4()}"), agent="ask-then-gate")
    task = asked["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    before = Task.objects.get(pk=task["id"]).event_seq
    gate = tmp_path / "gate"
    answers = {}
    params = user_message(str(gate), f"gate-{uuid.uuid4()}", taskId=task["id"], contextId=task["contextId"])
    key = {"Idempotency-Key": f'"{uuid.uuid4()}"'}

    def send(name: str) -> None:
        answers[name] = rpc("SendMessage", params, agent="ask-then-gate", headers=key)

    senders = [threading.Thread(target=send, args=(name,)) for name in ("original", "repeat")]
    senders[0].start()
    try:
        deadline = time.monotonic() + 20
        while Task.objects.get(pk=task["id"]).state != "working":
            assert time.monotonic() < deadline, "the follow-up's turn never started"
            time.sleep(0.05)
        senders[1].start()
        time.sleep(0.3)  # both blocking calls have joined the task's group
        asyncio.run(publish([(group_name(task["id"]), _batch(before, "TASK_STATE_INPUT_REQUIRED", turn=1))]))
        time.sleep(0.3)
    finally:
        gate.touch()
        for sender in senders:
            sender.join(30)
    assert sorted(answers) == ["original", "repeat"]
    for name, answer in answers.items():
        assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", name
        assert "Gate gate opened" in answer["result"]["task"]["status"]["message"]["parts"][0]["text"], name
    # The repeat stored nothing: the task holds the two user messages of the two turns.
    assert Task.objects.get(pk=task["id"]).messages.filter(role="user").count() == 2
