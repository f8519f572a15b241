"""A turn's claim, restart and close, tried again or raced: each does its work once, and all of it.

A turn run again after its worker was lost starts from the task as the lost
attempt found it. A write tried again after a commit that went through (the
database went away as it answered: tasks_app.turns.lease.retrying) knows its own work.

Service-level: the rows are made as the database holds them (a claimed turn, then
a lapsed lease put back in the queue, as the sweeper leaves it); the claim, the
restart and the close are the worker's own code, on the real database.
"""

import threading
import time
import uuid

import pytest
from a2a.types import a2a_pb2 as pb
from django.utils import timezone
from google.protobuf.json_format import MessageToDict

from tasks_app.access import Caller
from tasks_app.models import Message, Task
from tasks_app.services import task_cancel
from tasks_app.turns import TaskView, Turn, events_store, turn_finish
from tasks_app.turns import setup as turn_setup
from tasks_app.turns.setup import Claim, claim_and_prepare
from tests.conftest import slowed
from tests.tasks_app.turn_rows import running_turn


@pytest.fixture
def lost_turn(stored):
    """A task with metadata from an earlier turn, whose running turn is on its first attempt."""
    task, message = running_turn(attempts=1, lease_seconds=60, state="submitted")
    Task.objects.filter(pk=task.pk).update(metadata={"kept": "from an earlier turn"})
    yield Turn(task_pk=str(task.pk), message_pk=message.pk, attempt=1, timeout=60.0)
    Message.objects.filter(pk=message.pk).update(turn=Message.Turn.DONE, lease_until=None)


def _status_with_metadata(task_pk: str, metadata: dict) -> pb.TaskStatusUpdateEvent:
    event = pb.TaskStatusUpdateEvent(task_id=task_pk, status=pb.TaskStatus(state=pb.TASK_STATE_WORKING))
    event.metadata.update(metadata)
    return event


def test_a_rerun_finds_the_task_metadata_as_the_lost_attempt_found_it(lost_turn):
    turn = lost_turn
    message = Message.objects.get(pk=turn.message_pk)
    view = TaskView(messages=[message], artifacts=[])
    # The lost attempt noted where its work went (the a2a_proxy agent: its remote task)...
    lost = {"a2aProxy": {"remoteTaskId": f"remote-{uuid.uuid4()}"}, "kept": "overwritten"}
    assert events_store(turn, [_status_with_metadata(turn.task_pk, lost)], view) == "working"
    # ...then its worker was lost: the sweeper put the turn back in the queue.
    Message.objects.filter(pk=turn.message_pk).update(turn=Message.Turn.PENDING, lease_until=None)

    setup = claim_and_prepare(turn.task_pk, turn.message_pk, Claim())

    assert setup is not None
    rerun, _executor, request_context, _view = setup
    assert rerun.attempt == 2
    # The agent runs the turn again from its input: nothing of what the lost attempt noted.
    assert MessageToDict(request_context.current_task.metadata) == {"kept": "from an earlier turn"}
    assert Task.objects.get(pk=turn.task_pk).metadata == {"kept": "from an earlier turn"}


def test_a_closed_turn_keeps_no_copy_of_the_task_metadata(lost_turn):
    # The copy is only for a run again; a closed turn never runs again.
    turn = lost_turn
    view = TaskView(messages=[Message.objects.get(pk=turn.message_pk)], artifacts=[])
    assert events_store(turn, [_status_with_metadata(turn.task_pk, {"noted": "here"})], view) == "working"
    assert Message.objects.get(pk=turn.message_pk).turn_metadata_base == {"kept": "from an earlier turn"}
    done = pb.TaskStatusUpdateEvent(task_id=turn.task_pk, status=pb.TaskStatus(state=pb.TASK_STATE_COMPLETED))
    assert events_store(turn, [done], view) == "completed"
    assert Message.objects.get(pk=turn.message_pk).turn_metadata_base is None


def test_a_rerun_keeps_metadata_the_lost_attempt_did_not_touch(lost_turn):
    turn = lost_turn
    Message.objects.filter(pk=turn.message_pk).update(turn=Message.Turn.PENDING, lease_until=None)

    setup = claim_and_prepare(turn.task_pk, turn.message_pk, Claim())

    assert setup is not None
    assert MessageToDict(setup[2].current_task.metadata) == {"kept": "from an earlier turn"}


def test_a_rerun_whose_task_is_canceled_as_it_is_claimed_closes_and_gives_the_agent_its_cancel(
    lost_turn, monkeypatch
):
    turn = lost_turn
    task = Task.objects.select_related("tenant", "agent").get(pk=turn.task_pk)
    Message.objects.filter(pk=turn.message_pk).update(turn=Message.Turn.PENDING, lease_until=None)
    given = []
    monkeypatch.setattr(turn_setup, "agent_cancel_dispatch", given.append)
    # The worker reads what it claimed late: CancelTask comes between the claim and the restart.
    slowed(monkeypatch, turn_setup, "_load", 1.0)
    outcome = []
    worker = threading.Thread(
        target=lambda: outcome.append(claim_and_prepare(turn.task_pk, turn.message_pk, Claim()))
    )
    worker.start()
    deadline = time.monotonic() + 10
    while not Message.objects.filter(pk=turn.message_pk, turn=Message.Turn.RUNNING).exists():
        assert time.monotonic() < deadline, "the turn was never claimed"
        time.sleep(0.01)
    # CancelTask sees the turn running, and leaves the agent's cancel() to it.
    canceled = task_cancel(Caller(tenant=task.tenant, agent=task.agent, principal=task.owner), turn.task_pk)
    worker.join(timeout=30)

    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    assert outcome == [None]  # nothing to run
    # The turn is closed at once, not left running (counted against the tenant's
    # max_running_turns) until its lease lapses and a sweep finds it.
    assert Message.objects.get(pk=turn.message_pk).turn == Message.Turn.DONE
    assert given == [task.pk]


def test_a_claim_tried_again_after_its_commit_went_through_runs_the_turn(lost_turn):
    turn = lost_turn
    Message.objects.filter(pk=turn.message_pk).update(
        turn=Message.Turn.PENDING, turn_attempts=0, lease_until=None
    )
    claim = Claim()
    assert claim_and_prepare(turn.task_pk, turn.message_pk, claim) is not None
    # The database went away as the claim's statement committed: its answer was lost, and
    # the try raised before it could note the claim held. `retrying` tries again.
    claim.held = False

    setup = claim_and_prepare(turn.task_pk, turn.message_pk, claim)

    # The claim is known for this worker's own: the turn runs now, on its first attempt,
    # instead of waiting out its lease to be run again as if its worker were lost.
    assert setup is not None
    assert setup[0].attempt == 1
    assert Message.objects.get(pk=turn.message_pk).turn_attempts == 1


def test_a_close_tried_again_after_its_commit_went_through_still_gives_the_agent_its_cancel(lost_turn):
    turn = lost_turn
    # CancelTask came as the agent returned: it saw the turn running, and left the agent's cancel() to it.
    Task.objects.filter(pk=turn.task_pk).update(state="canceled")
    finished_at = timezone.now()
    assert turn_finish(turn.task_pk, turn.message_pk, None, attempt=1, finished_at=finished_at) is True
    # The answer to that COMMIT was lost: `retrying` tries the same close again.
    again = turn_finish(turn.task_pk, turn.message_pk, None, attempt=1, finished_at=finished_at)

    assert again is True  # canceled while this turn ran: the agent gets its cancel()
    closed = Message.objects.get(pk=turn.message_pk)
    assert (closed.turn, closed.turn_finished_at) == (Message.Turn.DONE, finished_at)


def test_a_turn_closed_by_another_is_not_taken_for_this_closes_own(lost_turn):
    turn = lost_turn
    Task.objects.filter(pk=turn.task_pk).update(state="canceled")
    # The sweeper gave the lapsed turn up (and the agent its cancel()) before this worker closed it.
    Message.objects.filter(pk=turn.message_pk).update(turn=Message.Turn.DONE, lease_until=None)

    assert turn_finish(turn.task_pk, turn.message_pk, None, attempt=1, finished_at=timezone.now()) is False
