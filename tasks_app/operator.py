"""What an operator does to a task from the console or the management API.

Each action goes through the same services the A2A bindings use, as the
tenant's operator (who sees every caller's tasks), and is audited.
"""

import uuid

from a2a.types import a2a_pb2 as pb
from django.db import transaction

from a2a_platform.tenants.audit import audit_record
from tasks_app.access import Caller
from tasks_app.models import Task
from tasks_app.services import message_send, task_cancel

# The data part an authorization answer carries; the approval handler reads it.
AUTHORIZATION_KEY = "authorization"


def operator_caller(task: Task, user) -> Caller:
    return Caller(tenant=task.tenant, agent=task.agent, principal=f"user:{user.pk}", sees_all=True)


def _send(task: Task, user, parts: list[pb.Part]) -> None:
    message = pb.Message(
        message_id=f"operator-{uuid.uuid4()}",
        role=pb.ROLE_USER,
        task_id=str(task.pk),
        context_id=task.context.context_id,
        parts=parts,
    )
    message_send(operator_caller(task, user), pb.SendMessageRequest(message=message))


@transaction.atomic
def operator_answer(task: Task, user, text: str) -> None:
    """Answer an input-required task; refused (UnsupportedOperationError) if it was already answered."""
    _send(task, user, [pb.Part(text=text)])
    audit_record(
        tenant=task.tenant,
        actor=f"user:{user.username}",
        action="task.answer",
        target_type="task",
        target_id=task.pk,
        details={"text": text[:500]},
    )


@transaction.atomic
def operator_authorize(task: Task, user, granted: bool) -> None:
    """Grant or deny an auth-required task. The handler decides what the answer means."""
    decision = "granted" if granted else "denied"
    data = pb.Part()
    data.data.struct_value.update({AUTHORIZATION_KEY: decision, "by": user.username})
    _send(task, user, [pb.Part(text=f"Authorization {decision} by {user.username}"), data])
    audit_record(
        tenant=task.tenant,
        actor=f"user:{user.username}",
        action=f"task.authorization_{decision}",
        target_type="task",
        target_id=task.pk,
    )


@transaction.atomic
def operator_cancel(task: Task, user) -> None:
    task_cancel(operator_caller(task, user), str(task.pk))
    audit_record(
        tenant=task.tenant,
        actor=f"user:{user.username}",
        action="task.cancel",
        target_type="task",
        target_id=task.pk,
    )
