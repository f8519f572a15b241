"""What an operator does to a task from the console or the management API.

Each action goes through the same services the A2A bindings use, as the
tenant's operator (who sees every caller's tasks), and is audited. Whether
the task still waits for this answer or grant (or can still be canceled) is
decided here, under the task's row lock, never in a view: a task that does
not raises TaskConflict, which the API answers with 409 and the console with
a flash message.

Each action and its audit record are one transaction (commits.atomic_checked):
a COMMIT that gets no answer is asked about, and an action stored after all
is done, not an error.
"""

import uuid

from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError, UnsupportedOperationError

from agents.approvals import APPROVERS, DENIED, GRANTED
from tasks_app.access import Caller, get_task_for_tenant
from tasks_app.commits import atomic_checked
from tasks_app.models import Message, Task, TaskEvent, TaskState
from tasks_app.selectors import principal_names
from tasks_app.services import CANCEL_ENTRY, message_send, task_cancel_stored
from tenants.audit import audit_record


class TaskConflict(Exception):
    """The task is not in a state that allows the action; `task` is the task as it is now.

    `by` names whoever moved it on, when someone's message did: an operator's
    username, "the caller", or "" (nobody answered: it was canceled or failed).
    `seen`: the task's last log entry when the operator looked (None: not known).
    """

    def __init__(self, task: Task, message: str, seen: int | None = None):
        self.task = task
        self.by = _moved_on_by(task, seen)
        super().__init__(f"{message}; it was answered by {self.by}" if self.by else message)


def _moved_on_by(task: Task, seen: int | None) -> str:
    """Who sent the message that took the task out of the wait the operator saw, if one did.

    With `seen`, the first user message stored after that log entry; without it, the
    newest user message, unless it is the request that started the task.
    """
    messages = Message.objects.filter(task=task, role=Message.Role.USER)
    if seen is not None:
        looked = TaskEvent.objects.filter(task=task, seq=seen).values_list("created_at", flat=True).first()
        after = messages.filter(created_at__gt=looked) if looked else messages.none()
        sender = after.order_by("created_at", "pk").values_list("sender", flat=True).first()
    else:
        newest = list(messages.order_by("-created_at", "-pk").values_list("sender", flat=True)[:2])
        # Only the request that started the task: nobody answered it.
        sender = newest[0] if len(newest) == 2 else None
    if sender is None:
        return ""
    if sender.startswith("user:"):
        return principal_names(task.tenant, [sender])[sender]
    return "the caller"


class NotAnApprover(Exception):
    """The operator asked to decide on a task they requested themselves: 403 in the API."""


def operator_caller(task: Task, user) -> Caller:
    # The console and the API let only operators and owners act on tasks, so the caller may approve.
    return Caller(
        tenant=task.tenant,
        agent=task.agent,
        principal=f"user:{user.pk}",
        sees_all=True,
        may_approve=True,
        name=user.get_username(),
    )


def _current(task: Task) -> Task:
    # The row lock makes a second operator wait for the first, then see the new state.
    return get_task_for_tenant(task.tenant, str(task.pk), for_update=True) or task


def _waiting(task: Task, state: str, seen: int | None) -> Task:
    """The locked, current task, if it still waits in `state` where the operator saw it; TaskConflict if not.

    seen: the task's last log entry when the operator looked (the console's forms carry it).
    A task that moved on since and asks again waits in the same state for another answer:
    one written for the question before is not sent to it.
    """
    current = _current(task)
    if current.state != state:
        raise TaskConflict(current, f"The task is {current.state}, not {state}", seen)
    if seen is not None and current.event_seq != seen:
        raise TaskConflict(
            current, f"The task moved on since (log entry {seen}, now {current.event_seq})", seen
        )
    return current


def _send(task: Task, user, parts: list[pb.Part], decision: str | None = None) -> Message:
    """The operator's message to a locked waiting task, stored in the caller's transaction: its row."""
    message = pb.Message(
        message_id=f"operator-{uuid.uuid4()}",
        role=pb.ROLE_USER,
        task_id=str(task.pk),
        context_id=task.context.context_id,
        parts=parts,
    )
    try:
        outcome = message_send(
            operator_caller(task, user),
            pb.SendMessageRequest(message=message),
            decision=decision,
            count_turn=False,
        )
    except UnsupportedOperationError as error:
        # The task stopped waiting (terminal, or answered) between our check and the send.
        raise TaskConflict(_current(task), error.message) from None
    return outcome.message


def _audited(task: Task, user, action: str, details: dict | None = None) -> None:
    """The audit record of an operator's action on `task`, in the action's transaction."""
    audit_record(
        tenant=task.tenant,
        actor=f"user:{user.username}",
        action=action,
        target_type="task",
        target_id=task.pk,
        details=details,
    )


def operator_answer(task: Task, user, text: str, seen: int | None = None) -> None:
    """Answer an input-required task; TaskConflict if it is not (or no longer) waiting for input.

    seen: the task's last log entry when the operator read the question (see _waiting).
    """

    def write() -> tuple[None, Message]:
        current = _waiting(task, TaskState.INPUT_REQUIRED, seen)
        stored = _send(current, user, [pb.Part(text=text)])
        _audited(current, user, "task.answer", details={"text": text[:500]})
        return None, stored

    atomic_checked(write, same=("task_id", "message_id"))


def operator_authorize(task: Task, user, granted: bool, seen: int | None = None) -> None:
    """Grant or deny an auth-required task as its approver; the handler decides what it means.

    TaskConflict if it does not wait for an authorization (or, given `seen`, moved
    on since); NotAnApprover if `user` sent the request: nobody approves their own request.
    """

    def write() -> tuple[None, Message]:
        current = _waiting(task, TaskState.AUTH_REQUIRED, seen)
        if current.owner == f"user:{user.pk}":
            raise NotAnApprover(f"You sent this request yourself. {APPROVERS}")
        decision = GRANTED if granted else DENIED
        # The decision travels in the message's approval record, not in its parts:
        # the text only tells a reader of the history what happened.
        text = f"Authorization {decision} by {user.get_username()}"
        stored = _send(current, user, [pb.Part(text=text)], decision)
        _audited(current, user, f"task.authorization_{decision}")
        return None, stored

    atomic_checked(write, same=("task_id", "message_id"))


def operator_cancel(task: Task, user) -> None:
    """Cancel a task; TaskConflict if it has ended already."""

    def write() -> tuple[None, TaskEvent]:
        try:
            _, entry = task_cancel_stored(operator_caller(task, user), str(task.pk))
        except (TaskNotCancelableError, TaskNotFoundError) as error:
            raise TaskConflict(_current(task), error.message) from None
        _audited(task, user, "task.cancel")
        return None, entry

    atomic_checked(write, same=CANCEL_ENTRY)
