"""Access helpers: the only way to fetch a tenant's task by id.

Each answers None for a task that does not exist, belongs to another tenant,
another agent, or another caller, so callers cannot tell those cases apart
(get_task_for_caller also for a message exchange, Task.Reply.MESSAGE).
get_task_for_caller serves the A2A bindings (one agent, one caller);
get_task_for_tenant the management API and the console (the whole tenant).
"""

import uuid
from dataclasses import dataclass, field

from django.db import connection

from agents.models import Agent
from tasks_app.models import Context, Message, Task
from tenants import sql
from tenants.access import usable_id
from tenants.models import Tenant


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
    # Holds the right to approve others' auth-required tasks (agents/approvals.py):
    # an operator or owner, or a token with the a2a:approve scope.
    may_approve: bool = False
    # How an approval names this caller ("alice", a client's name).
    name: str = ""


def parse_task_uuid(task_id: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(task_id))
    except ValueError:
        return None


def tasks_visible_to(caller: Caller):
    # A message exchange (the agent answered with a Message) is no task to an
    # A2A caller: only the console shows its record. get_task_for_caller states
    # the same rule in SQL: change both together.
    tasks = Task.objects.filter(tenant=caller.tenant, agent=caller.agent).exclude(reply=Task.Reply.MESSAGE)
    if not caller.sees_all:
        tasks = tasks.filter(owner=caller.principal)
    return tasks


def _one(tasks, pk: uuid.UUID, for_update: bool):
    tasks = tasks.filter(pk=pk)
    if for_update:
        tasks = tasks.select_for_update(of=("self",))
    return tasks


def get_task_for_caller(caller: Caller, task_id: str, *, for_update: bool = False) -> Task | None:
    """The caller's task (tasks_visible_to) with its context and status message, or None.

    Hand-written SQL (tenants/sql.py): GetTask, every follow-up message and
    every cancel start here. for_update locks the task's row.
    """
    pk = parse_task_uuid(task_id)
    if pk is None:
        return None
    # tasks_visible_to(caller), as SQL.
    where = "t.id = %s AND t.tenant_id = %s AND t.agent_id = %s AND t.reply <> %s"
    params = [sql.prep(Task, "id", pk), caller.tenant.pk, caller.agent.pk, Task.Reply.MESSAGE]
    if not caller.sees_all:
        where += " AND t.owner = %s"
        params.append(caller.principal)
    if for_update and connection.features.has_select_for_update_of:
        where += " FOR UPDATE OF t"
    row = sql.fetch_one(
        f"SELECT {sql.columns(Task, 't')}, {sql.columns(Context, 'c')}, {sql.columns(Message, 's')} "
        f"FROM {sql.table(Task)} t JOIN {sql.table(Context)} c ON c.id = t.context_id "
        f"LEFT JOIN {sql.table(Message)} s ON s.id = t.status_message_id WHERE {where}",
        params,
    )
    if row is None:
        return None
    task, context, status_message = sql.hydrate_all(row, Task, Context, Message)
    task.context, task.status_message = context, status_message
    return task


def get_task_for_tenant(tenant: Tenant, task_id: str, *, for_update: bool = False) -> Task | None:
    """One task of the tenant by its public id, or None (bad id, missing, another tenant's)."""
    pk = parse_task_uuid(task_id) if usable_id(str(task_id)) else None
    if pk is None:
        return None
    tasks = _one(Task.objects.filter(tenant=tenant), pk, for_update)
    return tasks.select_related("tenant", "agent", "context", "status_message").first()
