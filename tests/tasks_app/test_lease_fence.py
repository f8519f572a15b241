"""The lease fence (tasks_app.turns.run.Fence): an agent stops before its turn's lease could lapse.

The fault test (tests/faults/test_lease_fence.py) cuts a worker off from a
real database; these check the pieces on their own, and that a turn on a
healthy database is never stopped, whatever the heartbeat.
"""

import asyncio
import math
import time
import uuid

import httpx
import pytest
from django.test import override_settings

from tasks_app.turns.batches import TurnEventQueue
from tasks_app.turns.lease import Turn
from tasks_app.turns.run import Fence
from tests.conftest import SERVICES_MODE, user_message
from tests.live import start_web
from tests.tasks_app.test_turn_limits import _agent

LEASE = 10.0


def a_turn(renewed_ago: float) -> Turn:
    turn = Turn(task_pk=str(uuid.uuid4()), message_pk=1, attempt=1, timeout=60.0)
    turn.lease.renewed(time.monotonic() - renewed_ago)
    return turn


@override_settings(A2A_TURN_LEASE=LEASE)
def test_the_lease_clock_moves_on_with_each_renewal_and_a_closed_turn_has_none():
    turn = a_turn(renewed_ago=0.0)
    until = turn.lease.until
    assert turn.lease.fence_at() == pytest.approx(until - 0.2 * LEASE)
    # A renewal that started earlier than the last one (a batch tried again) moves nothing back.
    turn.lease.renewed(time.monotonic() - 5)
    assert turn.lease.until == until
    turn.lease.renewed(time.monotonic() + 1)
    assert turn.lease.until > until
    turn.lease.release()
    assert turn.lease.fence_at() == math.inf


async def ticking(steps: list[float]):
    while True:
        steps.append(time.monotonic())
        await asyncio.sleep(0.01)


@override_settings(A2A_TURN_LEASE=LEASE)
def test_an_agent_whose_lease_was_not_renewed_is_stopped_at_the_fence_with_its_batches():
    async def run():
        turn = a_turn(renewed_ago=0.8 * LEASE - 0.2)  # the fence is 0.2 s away
        steps: list[float] = []
        execution = asyncio.ensure_future(ticking(steps))
        queue = TurnEventQueue(turn)
        in_flight = asyncio.ensure_future(asyncio.sleep(30))  # a batch trying again through an outage
        queue.background.add(in_flight)
        fence = Fence(turn, execution, queue)
        fence.check()
        assert not fence.fired and fence.timer is not None
        await asyncio.wait({execution}, timeout=5)
        await asyncio.sleep(0)
        return turn, fence, execution, queue, in_flight, steps

    turn, fence, execution, queue, in_flight, steps = asyncio.run(run())
    assert fence.fired and execution.cancelled()
    assert queue.closed and in_flight.cancelled()
    assert max(steps) < turn.lease.fence_at() + 0.05, "the agent went on past its fence"


@override_settings(A2A_TURN_LEASE=LEASE)
def test_a_renewed_or_closed_turn_is_never_fenced():
    async def run(renew) -> Fence:
        turn = a_turn(renewed_ago=0.8 * LEASE - 0.1)
        execution = asyncio.ensure_future(ticking([]))
        fence = Fence(turn, execution, TurnEventQueue(turn))
        fence.check()
        renew(turn)  # a batch or the watcher renewed it, or a batch closed the turn
        await asyncio.sleep(0.3)
        fired = fence.fired
        execution.cancel()
        fence.disarm()
        return fired

    assert not asyncio.run(run(lambda turn: turn.lease.renewed(time.monotonic())))
    assert not asyncio.run(run(lambda turn: turn.lease.release()))


@pytest.mark.skipif(SERVICES_MODE, reason="the turn runs in the web process only on the embedded default")
def test_a_silent_turn_on_a_healthy_database_is_never_fenced_whatever_the_heartbeat(
    stored, db_settings, log_dir
):
    # A heartbeat longer than the fence's share of the lease: the watcher renews ahead of
    # the fence, so an agent that writes nothing for a while is not stopped and run again.
    _agent("sleeper-fenced", "sleeper", config={"seconds": 3})
    web = start_web(
        db_settings,
        log_dir,
        name="web-lease",
        extra_env={"A2A_TURN_LEASE": "1", "A2A_TURN_HEARTBEAT": "0.95", "A2A_SWEEP_INTERVAL": "0.5"},
    )
    try:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": user_message("sleep on it", f"lease-{uuid.uuid4()}"),
        }
        answer = httpx.post(
            web.agent_url("sleeper-fenced"), json=body, headers={"A2A-Version": "1.0"}, timeout=60
        ).json()
        task = answer["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
        texts = [part.get("text", "") for message in task.get("history", []) for part in message["parts"]]
        assert not any("restarted" in text for text in texts), texts
    finally:
        web.stop()
