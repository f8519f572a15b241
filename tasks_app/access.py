"""Access helpers: the only way to fetch a tenant's task by id.

Each answers None for a task that does not exist, belongs to another tenant,
another agent, or another caller, so callers cannot tell those cases apart
(get_task_for_caller also for a message exchange, Task.Reply.MESSAGE).
get_task_for_caller serves the A2A bindings (one agent, one caller), and
get_task_and_artifacts_for_caller their GetTask; get_task_for_tenant the
management API and the console (the whole tenant).

get_agent_and_task is the one exception to "checked as it is read": it reads
the task by its id together with the agent, before the agent (and so the
caller) is known, and hands the rows back unchecked in a TaskRead. They reach
an answer only through task_and_artifacts_for_caller, which applies the same
checks as get_task_and_artifacts_for_caller.
"""

import functools
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from django.db import connection
from django.db.models import F

from agents.access import can_name_agent, enabled_agent_of, enabled_agent_params, enabled_agent_sql
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
    # Checks the caller's credentials again, as they are stored now, for a stream that
    # outlives its request: raises what the binding refuses a caller with (protocol/auth.py).
    recheck: Callable[[], None] | None = field(default=None, compare=False, repr=False)


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
    params = [sql.prep(Task, "id", pk)]
    where = "t.id = %s"
    if for_update and connection.features.has_select_for_update_of:
        # Only a row the caller may see is locked (one the WHERE clause leaves out is not): a task
        # of another tenant, agent or caller, or a message exchange, locked by its own writers, is
        # not waited for, so the time an answer takes tells nothing of it. "+ 0" and "|| ''" keep
        # the lookup on the primary key (_visible).
        where += " AND t.tenant_id + 0 = %s AND t.agent_id + 0 = %s AND t.reply || '' <> %s"
        params += [caller.tenant.pk, caller.agent.pk, Task.Reply.MESSAGE]
        if not caller.sees_all:
            where += " AND t.owner || '' = %s"
            params.append(caller.principal)
        where += " FOR UPDATE OF t"
    row = sql.fetch_one(f"{_task_select(with_artifacts=False)} WHERE {where}", params)
    return _task_of(row, caller) if row is not None else None


# What a history entry shows (protocol.convert.message_fields): a page of history reads only
# these columns, in this order (selectors._history_page unpacks them).
HISTORY_FIELDS = (
    "id",
    "message_id",
    "role",
    "parts",
    "metadata",
    "extensions",
    "reference_task_ids",
)


class FoundTask(NamedTuple):
    """GetTask's read of the caller's task: the task, its artifacts (oldest first), and perhaps its history.

    `history`: the rows of the task's newest messages (HISTORY_FIELDS, newest
    first, as selectors._snapshot's own statement reads them) when the
    statement read them too (get_agent_and_task on PostgreSQL); None when
    they are still to be read.
    """

    task: Task
    artifacts: list[Artifact]
    history: list[tuple] | None = None


def get_task_and_artifacts_for_caller(caller: Caller, task_id: str) -> FoundTask | None:
    """get_task_for_caller and the task's artifacts (oldest first), in one statement: GetTask's read.

    One row per artifact (one with none), each repeating the task's columns:
    a statement fewer than reading them apart. For a Call already resolved (a
    dialect's); the bindings' GetTask reads this with its agent (get_agent_and_task).
    """
    pk = parse_task_uuid(task_id)
    if pk is None:
        return None
    rows = sql.fetch_all(
        f"{_task_select(with_artifacts=True)} WHERE t.id = %s ORDER BY a.created_at, a.id",
        [sql.prep(Task, "id", pk)],
    )
    return task_and_artifacts_for_caller(TaskRead(rows, 0), caller)


@dataclass(frozen=True)
class TaskRead:
    """GetTask's read of a task, not yet checked against a caller.

    The rows of a statement with _task_columns(with_artifacts=True) from column
    `start`, one per artifact; with NULLs there if no task was found. With
    `history`, the last columns of each row are the task's page of history,
    a column of values per field of HISTORY_FIELDS (_history_join).
    """

    rows: list
    start: int
    history: bool = False


def task_and_artifacts_for_caller(read: TaskRead, caller: Caller) -> FoundTask | None:
    """The task of a TaskRead and its artifacts (oldest first), or None: not found, or not the caller's."""
    task = _task_of(read.rows[0], caller, read.start) if read.rows else None
    if task is None:
        return None
    start = read.start + sql.width(Task) + sql.width(Context) + sql.width(Message)
    artifacts = [sql.hydrate(Artifact, row, start) for row in read.rows]
    history = None
    if read.history:
        history = list(zip(*(column or [] for column in read.rows[0][-len(HISTORY_FIELDS) :]), strict=True))
    return FoundTask(task, [artifact for artifact in artifacts if artifact is not None], history)


def get_agent_and_task(
    tenant_slug: str, agent_slug: str, task_id: str, *, history: int = 0
) -> tuple[Agent, TaskRead] | None:
    """The enabled agent at the URL (agents.access.get_enabled_agent) and a task read, in one statement.

    GetTask's whole read: a round trip fewer than looking the agent up first.
    The task is read by its id alone, whoever's it is (no task for an id that
    is no UUID); task_and_artifacts_for_caller then checks it against the
    caller the agent resolves. None: no such agent.

    `history` > 0 (PostgreSQL): its newest `history` messages come too
    (FoundTask.history), from a lateral subquery the task's row runs once,
    before the artifacts' rows repeat it. SQLite reads them apart
    (selectors._snapshot): it has no LATERAL, and its subquery in the SELECT
    list would run once per artifact.
    """
    if not can_name_agent(tenant_slug, agent_slug):
        return None
    pk = parse_task_uuid(task_id)
    select, joins, where = enabled_agent_sql()
    with_history = history > 0 and connection.vendor == "postgresql"
    if with_history:
        page_column, page_join, page_params = _history_columns(), _history_join(), [history]
    else:
        page_column, page_join, page_params = "", "", []
    rows = sql.fetch_all(
        f"SELECT {select}, {_task_columns(True)}{page_column} {joins} "
        f"LEFT JOIN {sql.table(Task)} t ON t.id = %s {_task_joins(False)}{page_join} {_artifact_join()} "
        f"WHERE {where} ORDER BY a.created_at, a.id",
        [
            None if pk is None else sql.prep(Task, "id", pk),
            *page_params,
            *enabled_agent_params(tenant_slug, agent_slug),
        ],
    )
    if not rows:
        return None
    return enabled_agent_of(rows[0]), TaskRead(rows, sql.width(Agent) + sql.width(Tenant), with_history)


@functools.cache
def _history_join() -> str:
    """PostgreSQL: task t's newest messages (LIMIT %s), newest first, as an array per field (hp.*).

    Read by the index on (task, created_at, id), as selectors._snapshot reads
    them. Arrays, not JSON built in the database: json_agg and
    json_build_array took PostgreSQL about 0.3 ms more for a page of a hundred
    messages than sending the same columns as text. Each array is filled from
    the subquery's rows in its order (the LIMIT's output, newest first) and
    all in one pass, so the n-th values of all of them are one message's.
    The JSON columns come as their text, decoded as a row of the page's own
    statement is (sql.json_values); no message: NULL arrays.
    """
    inner = sql.columns(Message, "m", HISTORY_FIELDS)
    arrays = ", ".join(
        f"array_agg(h.{column}{'::text' if field.get_internal_type() == 'JSONField' else ''}) AS {column}"
        for field, column in ((field, sql.quote(field.column)) for field in _history_fields())
    )
    return (
        f" LEFT JOIN LATERAL (SELECT {arrays} FROM (SELECT {inner} FROM {sql.table(Message)} m "
        "WHERE m.task_id = t.id ORDER BY m.created_at DESC, m.id DESC LIMIT %s) h) hp ON true"
    )


@functools.cache
def _history_columns() -> str:
    return "".join(f", hp.{sql.quote(field.column)}" for field in _history_fields())


def _history_fields() -> list:
    """The fields of HISTORY_FIELDS, in the order sql.columns selects them."""
    return [field for field in Message._meta.concrete_fields if field.attname in HISTORY_FIELDS]


@functools.cache
def _task_select(*, with_artifacts: bool) -> str:
    """SELECT a task with its context and status message (and its artifacts), up to the WHERE clause."""
    return f"SELECT {_task_columns(with_artifacts)} FROM {sql.table(Task)} t {_task_joins(with_artifacts)}"


@functools.cache
def _task_columns(with_artifacts: bool) -> str:
    """The task's columns (t), its context's (c) and its status message's (s) (and its artifacts' (a))."""
    columns = f"{sql.columns(Task, 't')}, {sql.columns(Context, 'c')}, {sql.columns(Message, 's')}"
    return f"{columns}, {sql.columns(Artifact, 'a')}" if with_artifacts else columns


@functools.cache
def _task_joins(with_artifacts: bool) -> str:
    """The joins of _task_columns after the task's table (t): outer, as the task may be outer-joined too."""
    joins = (
        f"LEFT JOIN {sql.table(Context)} c ON c.id = t.context_id "
        f"LEFT JOIN {sql.table(Message)} s ON s.id = t.status_message_id"
    )
    return f"{joins} {_artifact_join()}" if with_artifacts else joins


def _artifact_join() -> str:
    return f"LEFT JOIN {sql.table(Artifact)} a ON a.task_id = t.id"


def _task_of(row, caller: Caller, start: int = 0) -> Task | None:
    """The task of a row with _task_columns from `start`, with its context and status message.

    None if there is none (outer-joined) or the caller may not see it.
    """
    task, context, status_message = sql.hydrate_all(row, Task, Context, Message, start=start)
    if task is None or not _visible(task, caller):
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
    tasks; tests/tasks_app/test_query_plans.py). A lookup for_update states
    the rule in its WHERE clause too, in a form no index serves, so that it
    never locks a row it must not show (get_task_for_caller).
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
        # Never a lock on another tenant's row, as in get_task_for_caller ("+ 0": still by its key).
        tasks = tasks.alias(tenant_of=F("tenant_id") + 0).filter(tenant_of=tenant.pk)
        tasks = tasks.select_for_update(of=("self",))
    task = tasks.first()
    return task if task is not None and task.tenant_id == tenant.pk else None
