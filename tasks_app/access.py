"""Access helpers: the only way to fetch a tenant's task by id.

Each answers None for a task that does not exist, belongs to another tenant,
another agent, or another caller, so callers cannot tell those cases apart.
"""

import uuid
from dataclasses import dataclass, field

from a2a_platform.tenants.models import Tenant
from agents.models import Agent
from tasks_app.models import Task


@dataclass(frozen=True)
class Caller:
    """Who is calling an agent endpoint, resolved by the binding layer."""

    tenant: Tenant
    agent: Agent
    # "client:<client_id>", "user:<id>" or "anonymous" (all anonymous callers share one scope).
    principal: str = "anonymous"
    scopes: frozenset[str] = field(default_factory=frozenset)
    # Tenant operators (console) see every caller's tasks.
    sees_all: bool = False


def parse_task_uuid(task_id: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(task_id))
    except ValueError:
        return None


def tasks_visible_to(caller: Caller):
    tasks = Task.objects.filter(tenant=caller.tenant, agent=caller.agent)
    if not caller.sees_all:
        tasks = tasks.filter(owner=caller.principal)
    return tasks


def get_task_for_caller(caller: Caller, task_id: str, *, for_update: bool = False) -> Task | None:
    pk = parse_task_uuid(task_id)
    tasks = tasks_visible_to(caller)
    if pk is None:
        # Draft-dialect clients name tasks themselves; those ids live beside the UUID.
        tasks = tasks.filter(client_task_id=task_id)
    else:
        tasks = tasks.filter(pk=pk)
    if for_update:
        tasks = tasks.select_for_update(of=("self",))
    return tasks.select_related("context", "status_message").first()
