"""Access helpers: the only way to fetch a tenant's task by id.

Each answers None for a task that does not exist, belongs to another tenant,
another agent, or another caller, so callers cannot tell those cases apart
(get_task_for_caller also for a message exchange, Task.Reply.MESSAGE).
get_task_for_caller serves the A2A bindings (one agent, one caller), and
get_task_and_artifacts_for_caller their GetTask; get_task_for_tenant the
management API and the console (the whole tenant).
"""

import functools
import uuid
from dataclasses import dataclass, field

from django.db import connection

from agents.models import Agent
from tasks_app.models import Artifact, Context, Message, Task
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
    # A2A caller: only the console shows its record. _visible states the same
    # rule for one row: change both together.
    tasks = Task.objects.filter(tenant=caller.tenant, agent=caller.agent).exclude(reply=Task.Reply.MESSAGE)
    if not caller.sees_all:
        tasks = tasks.filter(owner=caller.principal)
    return tasks


def get_task_for_caller(caller: Caller, task_id: str, *, for_update: bool = False) -> Task | None:
    """The caller's task (tasks_visible_to) with its context and status message, or None.

    Hand-written SQL (tenants/sql.py): GetTask, every follow-up message and
    every cancel start here. for_update locks the task's row.
    """
    pk = parse_task_uuid(task_id)
    if pk is None:
        return None
    lock = " FOR UPDATE OF t" if for_update and connection.features.has_select_for_update_of else ""
    statement = f"{_task_select(with_artifacts=False)} WHERE t.id = %s{lock}"
    row = sql.fetch_one(statement, [sql.prep(Task, "id", pk)])
    return _task_of(row, caller) if row is not None else None


def get_task_and_artifacts_for_caller(caller: Caller, task_id: str) -> tuple[Task, list[Artifact]] | None:
    """get_task_for_caller and the task's artifacts (oldest first), in one statement: GetTask's read.

    One row per artifact (one with none), each repeating the task's columns;
    a statement fewer than reading them apart, a round trip to the database
    of the three a GetTask makes.
    """
    pk = parse_task_uuid(task_id)
    if pk is None:
        return None
    rows = sql.fetch_all(
        f"{_task_select(with_artifacts=True)} WHERE t.id = %s ORDER BY a.created_at, a.id",
        [sql.prep(Task, "id", pk)],
    )
    task = _task_of(rows[0], caller) if rows else None
    if task is None:
        return None
    start = sql.width(Task) + sql.width(Context) + sql.width(Message)
    artifacts = [sql.hydrate(Artifact, row, start) for row in rows]
    return task, [artifact for artifact in artifacts if artifact is not None]


@functools.cache
def _task_select(*, with_artifacts: bool) -> str:
    """SELECT a task with its context and status message (and its artifacts), up to the WHERE clause."""
    select = f"SELECT {sql.columns(Task, 't')}, {sql.columns(Context, 'c')}, {sql.columns(Message, 's')}"
    tables = (
        f"FROM {sql.table(Task)} t JOIN {sql.table(Context)} c ON c.id = t.context_id "
        f"LEFT JOIN {sql.table(Message)} s ON s.id = t.status_message_id"
    )
    if with_artifacts:
        select += f", {sql.columns(Artifact, 'a')}"
        tables += f" LEFT JOIN {sql.table(Artifact)} a ON a.task_id = t.id"
    return f"{select} {tables}"


def _task_of(row, caller: Caller) -> Task | None:
    """The task of a _task_select row, with its context and status message, if the caller sees it."""
    task, context, status_message = sql.hydrate_all(row, Task, Context, Message)
    if not _visible(task, caller):
        return None
    task.context, task.status_message = context, status_message
    return task


def _visible(task: Task, caller: Caller) -> bool:
    """tasks_visible_to(caller), for one task row.

    Checked on the row, not in the statement: by its primary key alone the
    lookup is one index probe whatever the planner knows. With the tenant and
    agent in the WHERE clause too, PostgreSQL without statistics on the table
    (before its first ANALYZE, or with autovacuum off) picks the (tenant,
    agent) index instead and reads every task of the agent (1 ms at 4,600
    tasks; tests/tasks_app/test_query_plans.py). A row of another tenant
    locked for_update is answered None like a missing one, and its lock ends
    with the caller's transaction.
    """
    return (
        task.tenant_id == caller.tenant.pk
        and task.agent_id == caller.agent.pk
        and task.reply != Task.Reply.MESSAGE
        and (caller.sees_all or task.owner == caller.principal)
    )


def get_task_for_tenant(tenant: Tenant, task_id: str, *, for_update: bool = False) -> Task | None:
    """One task of the tenant by its public id, or None (bad id, missing, another tenant's)."""
    pk = parse_task_uuid(task_id) if usable_id(str(task_id)) else None
    if pk is None:
        return None
    # By its primary key alone, and the tenant checked on the row, as in get_task_for_caller.
    tasks = Task.objects.filter(pk=pk).select_related("tenant", "agent", "context", "status_message")
    if for_update:
        tasks = tasks.select_for_update(of=("self",))
    task = tasks.first()
    return task if task is not None and task.tenant_id == tenant.pk else None
