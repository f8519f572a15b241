"""The tasks a turn's agent gets as related (RequestContext.related_tasks): what its owner may read.

A caller names them in a message's referenceTaskIds, and may name any id. The
agent answers to the task's owner, so it gets only the tasks GetTask would
show that owner: of the same agent, the owner's own, not a message exchange.
"""

import uuid

from django.utils import timezone

from agents.models import Agent
from tasks_app.models import Context, Message, Task
from tasks_app.turns.setup import _request_context
from tenants.models import Tenant


def _task(agent: Agent, owner: str, **fields) -> Task:
    context = Context.objects.create(tenant=agent.tenant, owner=owner, context_id=f"related-{uuid.uuid4()}")
    now = timezone.now()
    return Task.objects.create(
        tenant=agent.tenant, agent=agent, context=context, owner=owner, status_timestamp=now, **fields
    )


def test_an_agent_gets_only_the_related_tasks_its_tasks_owner_may_read(stored):
    echo = Agent.objects.select_related("tenant").get(tenant__slug="demo", slug="echo")
    clarify = Agent.objects.select_related("tenant").get(tenant__slug="demo", slug="clarify")
    other_tenant = Tenant.objects.create(slug=f"related-{uuid.uuid4().hex[:8]}", name="Related test")
    elsewhere = Agent.objects.create(tenant=other_tenant, slug="echo", name="Echo", handler="echo")
    alice, bob = f"client:alice-{uuid.uuid4()}", f"client:bob-{uuid.uuid4()}"

    own = _task(echo, alice)
    named = {
        "own": own,
        "another caller's": _task(echo, bob),
        "another agent's": _task(clarify, alice),
        "another tenant's": _task(elsewhere, alice),
        "a message exchange": _task(echo, alice, reply=Task.Reply.MESSAGE),
    }
    task = _task(echo, alice)
    message = Message.objects.create(
        tenant=echo.tenant,
        task=task,
        context=task.context,
        message_id=f"m-{uuid.uuid4()}",
        role=Message.Role.USER,
        parts=[{"text": "compare"}],
        reference_task_ids=[str(t.pk) for t in named.values()] + ["not-a-uuid", str(uuid.uuid4())],
    )
    task = Task.objects.select_related("agent", "tenant", "context", "status_message").get(pk=task.pk)

    context = _request_context(task, message)

    assert [related.id for related in context.related_tasks] == [str(own.pk)]
