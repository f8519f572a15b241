"""Closing a turn: a task its agent left unsettled ends FAILED, with the reason."""

from datetime import datetime

from a2a.types import a2a_pb2 as pb
from django.db import transaction
from django.utils import timezone

from tasks_app.models import (
    Message,
    Task,
    TaskState,
)
from tasks_app.turns.batches import BatchWriter
from tasks_app.turns.lease import Turn, TurnTimedOut, closed_turn_fields, lock_task


def turn_finish(
    task_pk,
    message_pk: int,
    error: BaseException | None,
    *,
    attempt: int | None = None,
    finished_at: datetime | None = None,
) -> bool:
    """Close a turn. A task the agent left unsettled ends FAILED with the reason.

    True if the task was CANCELED when the turn closed. The turn is marked done
    while holding the task's lock, which task_cancel takes too: a cancel either
    sees this turn running (and leaves the agent's cancel() to it) or done.
    With an attempt, nothing happens if another attempt holds the turn now.

    `finished_at`: the end this close writes, the same for every try of it
    (`retrying`): a try after one whose commit went through finds it there,
    and answers as that one did (but for a cancel that came in between: it
    found no turn running and gave the agent its cancel() itself, so the agent
    may get two, in a window only a database outage opens).
    """
    finished_at = finished_at or timezone.now()
    with transaction.atomic():
        task = lock_task(task_pk)
        closing = Message.objects.filter(pk=message_pk)
        if attempt is not None:
            closing = closing.filter(turn=Message.Turn.RUNNING, turn_attempts=attempt)
        closed = closing.update(**closed_turn_fields(finished_at))
        if not closed:
            # Closed already. By this close itself (its answer lost), if the end is its own: the
            # failure it wrote is there, and a cancel it found still wants the agent's cancel().
            mine = Message.objects.filter(pk=message_pk, turn=Message.Turn.DONE, turn_finished_at=finished_at)
            return task.state == TaskState.CANCELED and mine.exists()
        if task.is_terminal or task.is_interrupted:
            return task.state == TaskState.CANCELED
        if Message.objects.filter(task=task, role=Message.Role.USER, pk__gt=message_pk).exists():
            # The agent asked, and the answer came before this turn closed: the
            # task belongs to the answer's turn now, not to this one.
            return False
        if isinstance(error, TurnTimedOut):
            reason = f"The turn was stopped: {error}."
        elif error is not None:
            reason = f"The agent failed: {error.__class__.__name__}: {error}"
        else:
            reason = "The agent ended its turn without reaching a final state."
        task_fail(task, reason)
    return False


def task_fail(task: Task, reason: str) -> None:
    """End a locked task FAILED, saying why (inside the caller's transaction)."""
    writer = BatchWriter(task, Turn(str(task.pk), 0, 0, 0.0))
    writer.apply(
        pb.TaskStatusUpdateEvent(
            status=pb.TaskStatus(
                state=pb.TASK_STATE_FAILED,
                message=pb.Message(role=pb.ROLE_AGENT, parts=[pb.Part(text=reason)]),
            )
        )
    )
    writer.commit()
