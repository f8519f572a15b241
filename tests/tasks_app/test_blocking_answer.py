"""A blocking follow-up is answered with its own turn's outcome, never an earlier turn's.

An earlier turn's final batch is published after it commits, without waiting:
an agent that blocks its loop, or a slow Redis, can make it late. A client
that learned of that state another way (GetTask, a webhook) and answered at
once had its blocking follow-up waiting when the late batch came, and was
answered with it: the previous turn's INPUT_REQUIRED, without its own message.
"""

import asyncio
import uuid

from tasks_app.events import Feed, group_name, publish, wait_until_settled

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
