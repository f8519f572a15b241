"""The lease fence (tasks_app.turns.run.Fence): an agent stops before its turn's lease could lapse.

The fault test (tests/faults/test_lease_fence.py) cuts a worker off from a
real database; these check the pieces on their own, and that a turn on a
healthy database is never stopped, whatever the heartbeat.
"""

import asyncio
import math
import time
import uuid
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tasks_app.models import Message
from tasks_app.turns import turn_claim
from tasks_app.turns.batches import TurnEventQueue
from tasks_app.turns.keeper import LATE_AFTER, LeaseKeeper
from tasks_app.turns.lease import Turn
from tasks_app.turns.run import STOP_AT_LEAST, STOP_TIMEOUT, Fence
from tasks_app.turns.setup import Claim, _prepare
from tests.conftest import SERVICES_MODE, rpc_to, user_message
from tests.live import start_web
from tests.tasks_app.test_query_counts import Rollback, _caller, _first_turn, _send
from tests.tasks_app.test_turn_limits import _agent

LEASE = 10.0


def a_turn(renewed_ago: float, message_pk: int = 1) -> Turn:
    turn = Turn(task_pk=str(uuid.uuid4()), message_pk=message_pk, attempt=1, timeout=60.0)
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
def test_a_fenced_agent_is_given_until_half_way_to_the_lapse_to_stop():
    # Fenced on time (a fifth of the lease before the lapse), it gets a tenth of the lease; fenced
    # late (a database call held the thread), a moment to let go; never more than STOP_TIMEOUT.
    async def stop_within(renewed_ago: float) -> float:
        execution = asyncio.ensure_future(asyncio.sleep(0))
        fence = Fence(a_turn(renewed_ago=renewed_ago), execution, TurnEventQueue(a_turn(renewed_ago)))
        await execution
        return fence.stop_within()

    assert 0.95 <= asyncio.run(stop_within(LEASE * 0.8)) <= 1.0
    assert asyncio.run(stop_within(LEASE * 0.95)) == STOP_AT_LEAST
    assert asyncio.run(stop_within(0.0)) == STOP_TIMEOUT


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


@override_settings(A2A_TURN_LEASE=LEASE, A2A_TURN_HEARTBEAT=2.0)
def test_the_keeper_takes_only_turns_whose_watcher_is_late_and_lets_go_of_a_late_one_past_its_time():
    keeper = LeaseKeeper(thread=False)
    # The watcher renews after one heartbeat (2 s), the keeper after LATE_AFTER of them (3 s).
    assert LATE_AFTER == 1.5
    fresh = a_turn(renewed_ago=2.0, message_pk=1)
    late = a_turn(renewed_ago=4.0, message_pk=2)
    closed = a_turn(renewed_ago=5.0, message_pk=3)
    closed.lease.release()
    stuck = a_turn(renewed_ago=5.0, message_pk=4)
    quiet = a_turn(renewed_ago=0.0, message_pk=5)
    now = time.monotonic()
    for turn in (fresh, late, closed):
        keeper.hold(turn, until=now + 60)
    # Past their time limits (and the time a stop is given): a late one is let go, its lease
    # lapses; one whose watcher keeps up is not the keeper's concern.
    keeper.hold(stuck, until=now - 1)
    keeper.hold(quiet, until=now - 1)
    assert keeper.due(now) == [late]
    assert sorted(keeper.held) == [1, 2, 3, 5]
    assert 0.01 <= keeper.pause(now) <= 1.0  # until fresh falls due
    # A turn held again (its next attempt on this process) is not dropped by the last one's drop.
    keeper.drop(a_turn(renewed_ago=0.0, message_pk=2))
    assert sorted(keeper.held) == [1, 2, 3, 5]
    keeper.drop(late)
    assert keeper.due(now) == []


def test_the_keeper_renews_late_leases_in_one_statement_and_lets_go_of_those_no_longer_held(stored):
    keeper = LeaseKeeper(thread=False)
    with pytest.raises(Rollback), transaction.atomic():  # rolled back: nothing is dispatched
        caller = _caller()
        turns = []
        for _ in range(3):
            outcome = _send(caller)
            claim = Claim()
            assert turn_claim(str(outcome.task.pk), _first_turn(outcome), claim.start())
            turns.append(_prepare(str(outcome.task.pk), _first_turn(outcome), claim)[0])
        kept, lost, closed = turns
        # Another attempt took the second turn, the third was closed: neither lease is this worker's.
        Message.objects.filter(pk=lost.message_pk).update(turn_attempts=F("turn_attempts") + 1)
        Message.objects.filter(pk=closed.message_pk).update(turn=Message.Turn.DONE)
        for turn in turns:
            Message.objects.filter(pk=turn.message_pk).update(lease_until=timezone.now())
            keeper.hold(turn, until=time.monotonic() + 60)
        fence_before = kept.lease.fence_at()
        with CaptureQueriesContext(connection) as queries:
            keeper.renew(turns)
        assert len(queries.captured_queries) == 1
        assert kept.lease.fence_at() > fence_before
        assert list(keeper.held) == [kept.message_pk]
        rows = Message.objects.filter(pk__in=[turn.message_pk for turn in turns])
        leases = dict(rows.values_list("pk", "lease_until"))
        assert leases[kept.message_pk] > timezone.now() + timedelta(seconds=settings.A2A_TURN_LEASE / 2)
        assert leases[lost.message_pk] <= timezone.now()
        assert leases[closed.message_pk] <= timezone.now()
        raise Rollback


def _send_with_a_short_lease(
    db_settings, log_dir, agent: str, lease: str, heartbeat: str
) -> tuple[dict, str]:
    """A blocking send to `agent` on a web process of its own, under a short lease: (task, web log)."""
    web = start_web(
        db_settings,
        log_dir,
        name=f"web-{agent}",
        extra_env={"A2A_TURN_LEASE": lease, "A2A_TURN_HEARTBEAT": heartbeat, "A2A_SWEEP_INTERVAL": "0.5"},
    )
    try:
        answer = rpc_to(web, "SendMessage", user_message("sleep on it", f"lease-{uuid.uuid4()}"), agent=agent)
        return answer["result"]["task"], web.processes[0].output()
    finally:
        web.stop()


def _ran_once(task: dict) -> None:
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
    texts = [part.get("text", "") for message in task.get("history", []) for part in message["parts"]]
    assert not any("restarted" in text for text in texts), texts
    assert Message.objects.get(task_id=task["id"], role=Message.Role.USER).turn_attempts == 1


@pytest.mark.skipif(SERVICES_MODE, reason="the turn runs in the web process only on the embedded default")
def test_a_silent_turn_on_a_healthy_database_is_never_fenced_whatever_the_heartbeat(
    stored, db_settings, log_dir
):
    # A heartbeat longer than the fence's share of the lease: the watcher renews ahead of
    # the fence, so an agent that writes nothing for a while is not stopped and run again.
    _agent("sleeper-fenced", "sleeper", config={"seconds": 3})
    task, _ = _send_with_a_short_lease(db_settings, log_dir, "sleeper-fenced", lease="1", heartbeat="0.95")
    _ran_once(task)


@pytest.mark.skipif(SERVICES_MODE, reason="the turn runs in the web process only on the embedded default")
def test_an_agent_that_blocks_its_loop_keeps_its_lease_on_a_healthy_database(stored, db_settings, log_dir):
    # A synchronous call in an async execute() holds the turn's loop, and its watcher with it,
    # for two and a half leases. The process's lease keeper renews the lease meanwhile: the
    # agent is not stopped at the fence as it comes back, nor run again by the sweeper.
    _agent("sleeper-blocking", "sleeper", config={"seconds": 5, "blocking": True})
    task, log = _send_with_a_short_lease(db_settings, log_dir, "sleeper-blocking", lease="2", heartbeat="0.5")
    _ran_once(task)
    assert "its lease is kept meanwhile" in log
