"""A batch tried again after a commit that went through, though its answer was lost, is not stored twice.

The database can go away as a COMMIT goes through (a restart): psycopg raises,
the turn tries the batch again once the database is back (tasks_app.turns.lease.retrying),
and that try must find the batch stored instead of logging its events, its
messages and its artifacts a second time.
"""

import uuid

import pytest
from a2a.types import a2a_pb2 as pb

from tasks_app.models import Artifact, Message, Task, TaskEvent
from tasks_app.turns import TaskView, Turn, events_store
from tasks_app.turns.batches import _Written
from tasks_app.turns.setup import _restart
from tests.tasks_app.turn_rows import running_turn


@pytest.fixture
def claimed_turn(stored):
    """A task whose first turn a worker holds, as _load leaves it; closed after the test.

    Left running, the turn would keep other tests waiting for the turns in the database to end.
    """
    turn, view = _claimed_turn()
    yield turn, view
    Message.objects.filter(pk=turn.message_pk).update(turn=Message.Turn.DONE, lease_until=None)


def _claimed_turn() -> tuple[Turn, TaskView]:
    task, message = running_turn(attempts=1, lease_seconds=60, state="submitted")
    turn = Turn(task_pk=str(task.pk), message_pk=message.pk, attempt=1, timeout=60.0)
    return turn, TaskView(messages=[message], artifacts=[])


def _progress(task_pk: str) -> list:
    """A burst that does not settle the task: WORKING with a message, and an artifact."""
    return [
        pb.TaskStatusUpdateEvent(
            task_id=task_pk,
            status=pb.TaskStatus(
                state=pb.TASK_STATE_WORKING,
                message=pb.Message(
                    message_id=f"w-{uuid.uuid4()}", role=pb.ROLE_AGENT, parts=[pb.Part(text="on it")]
                ),
            ),
        ),
        pb.TaskArtifactUpdateEvent(
            task_id=task_pk, artifact=pb.Artifact(artifact_id="draft", parts=[pb.Part(text="first part")])
        ),
    ]


def _stored(task_pk: str) -> tuple[int, int, int]:
    return (
        TaskEvent.objects.filter(task_id=task_pk).count(),
        Message.objects.filter(task_id=task_pk).count(),
        Artifact.objects.filter(task_id=task_pk).count(),
    )


def test_a_batch_tried_again_after_its_commit_went_through_is_stored_once(claimed_turn):
    turn, view = claimed_turn
    batch = _progress(turn.task_pk)
    written = _Written()

    assert events_store(turn, batch, view, written) == "working"
    once = _stored(turn.task_pk)
    # The answer to that COMMIT was lost: the same batch, tried again.
    view_before = ([m.pk for m in view.messages], [a.pk for a in view.artifacts])
    assert events_store(turn, batch, view, written) == "working"

    assert _stored(turn.task_pk) == once == (2, 2, 1)
    assert ([m.pk for m in view.messages], [a.pk for a in view.artifacts]) == view_before
    # The next batch goes on from there.
    assert events_store(turn, _progress(turn.task_pk)[:1], view, _Written()) == "working"
    assert _stored(turn.task_pk) == (3, 3, 1)


def test_a_batch_found_stored_in_a_task_canceled_since_ends_the_turn_as_canceled(claimed_turn):
    turn, view = claimed_turn
    batch = _progress(turn.task_pk)
    written = _Written()
    assert events_store(turn, batch, view, written) == "working"
    Task.objects.filter(pk=turn.task_pk).update(state="canceled")  # CancelTask, after that commit

    # Tried again: stored, but the task is canceled now. As for any batch that finds it so, the
    # turn may write no more, and goes on to close and give the agent its cancel().
    assert events_store(turn, batch, view, written) is None
    assert _stored(turn.task_pk) == (2, 2, 1)


def test_a_batch_is_known_by_its_first_entry_not_by_its_place_alone(claimed_turn):
    turn, view = claimed_turn
    assert events_store(turn, _progress(turn.task_pk), view, _Written()) == "working"
    # A try that wrote nothing, where other entries stand now: the batch is not there yet.
    written = _Written(seq=1, payload={"statusUpdate": {"not": "this batch"}})

    assert events_store(turn, _progress(turn.task_pk), view, written) == "working"

    assert _stored(turn.task_pk) == (4, 3, 1)


def test_a_restart_tried_again_after_its_commit_went_through_is_logged_once(claimed_turn):
    turn, view = claimed_turn
    # Attempt 1 stored a batch, then its worker was lost; attempt 2 holds the turn now.
    assert events_store(turn, _progress(turn.task_pk), view, _Written()) == "working"
    Message.objects.filter(pk=turn.message_pk).update(turn_attempts=2)
    second = Turn(task_pk=turn.task_pk, message_pk=turn.message_pk, attempt=2, timeout=60.0)

    assert _restart(second) is True
    once = _stored(turn.task_pk)
    assert _restart(second) is True  # the answer to its COMMIT was lost: tried again

    assert _stored(turn.task_pk) == once == (3, 2, 0)  # the restart's status; attempt 1's undone
