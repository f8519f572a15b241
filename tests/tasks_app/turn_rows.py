"""A task of the demo echo agent with its first turn RUNNING, made as the database holds one (no worker)."""

import uuid
from datetime import timedelta

from django.utils import timezone

from agents.models import Agent
from tasks_app.models import Context, Message, Task, TaskState


def running_turn(
    *, attempts: int, lease_seconds: float, state: str = TaskState.WORKING
) -> tuple[Task, Message]:
    """The task and its user message; the turn's lease ends `lease_seconds` from now (< 0: lapsed)."""
    agent = Agent.objects.select_related("tenant").get(tenant__slug="demo", slug="echo")
    context = Context.objects.create(tenant=agent.tenant, context_id=f"turn-{uuid.uuid4()}")
    task = Task.objects.create(
        tenant=agent.tenant, agent=agent, context=context, state=state, status_timestamp=timezone.now()
    )
    message = Message.objects.create(
        tenant=agent.tenant,
        task=task,
        context=context,
        message_id=f"turn-{uuid.uuid4()}",
        role=Message.Role.USER,
        parts=[{"text": "work"}],
        turn=Message.Turn.RUNNING,
        turn_attempts=attempts,
        lease_until=timezone.now() + timedelta(seconds=lease_seconds),
    )
    return task, message
