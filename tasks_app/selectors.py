"""Reads: a task as readers get it, and task lists for ListTasks, the management API and the console.

Every list of tasks filters through tasks_matching, with the filters as
arguments, over a base queryset that already says whose tasks these are
(a caller's, via tasks_visible_to, or a tenant's). An empty filter is no filter.
"""

import base64
import hashlib
import json
import uuid
from datetime import UTC, datetime

from a2a.utils.errors import InvalidParamsError
from django.contrib.auth import get_user_model
from django.core.cache import caches
from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery

from tasks_app.access import HISTORY_FIELDS, Caller, parse_task_uuid, tasks_visible_to
from tasks_app.models import Artifact, DraftTaskAlias, Message, Task
from tasks_app.protocol.convert import (
    artifact_dict,
    message_dict,
    message_fields,
    status_fields,
    task_dict,
    task_fields,
)
from tenants import sql
from tenants.models import Application, Tenant

# Messages a task read returns when the caller names no historyLength.
DEFAULT_HISTORY_LENGTH = 100


def task_snapshot(task_pk, *, history_length: int | None = None, include_artifacts: bool = True) -> dict:
    """The stored task as ProtoJSON, read in three queries.

    historyLength unset returns the newest DEFAULT_HISTORY_LENGTH messages, so
    reading a long conversation costs the same as reading a short one.
    """
    task = Task.objects.select_related("context", "status_message").get(pk=task_pk)
    return _snapshot(task, history_length=history_length, include_artifacts=include_artifacts)


def snapshot_of(
    task: Task,
    *,
    history_length: int | None = None,
    artifacts: list[Artifact] | None = None,
    history: list[tuple] | None = None,
) -> dict:
    """task_snapshot() of a task already read with its context and status message (two queries).

    With its artifacts read too (access.get_task_and_artifacts_for_caller), one query: its page of
    history. With that page read too (access.FoundTask.history, of history_length + 1 messages), none.
    """
    return _snapshot(task, history_length=history_length, artifacts=artifacts, history=history)


def history_to_read(history_length: int | None) -> int:
    """How many messages a snapshot with this historyLength reads.

    One more than asked: the status message is left out of the history.
    """
    return (DEFAULT_HISTORY_LENGTH if history_length is None else history_length) + 1


def send_answer(task_pk, *, history_length: int | None = None) -> dict:
    """What SendMessage answers for a stored task: {"message": ...} (a message exchange) or {"task": ...}."""
    task = Task.objects.select_related("context", "status_message").get(pk=task_pk)
    if task.is_message_exchange and task.status_message is not None:
        return {"message": reply_dict(task)}
    return {"task": _snapshot(task, history_length=history_length)}


# Reads of a snapshot between two looks at the log's position before send_answer_at gives up
# on a task that writes faster than it is read, and reads it in a transaction of its own.
SNAPSHOT_TRIES = 3


def send_answer_at(task_pk) -> tuple[int, dict]:
    """send_answer() and the log position it reflects (the task's event_seq), both as of one moment.

    A stream starts with this snapshot and goes on with the log after that
    position. Read apart, a batch committed in between would be in the
    snapshot and again in the log after it: an artifact chunk appended twice.
    Every change a reader sees comes with a log entry, which moves event_seq:
    so the position is read before and after the snapshot, and the two agree
    when no batch committed in between (one statement more). No transaction:
    on SQLite every one of them takes the writers' lock (IMMEDIATE).
    """
    position = _log_position(task_pk)
    for _ in range(SNAPSHOT_TRIES):
        answer = send_answer(task_pk)
        after = _log_position(task_pk)
        if after == position:
            return position, answer
        position = after
    # One transaction that sees one state: REPEATABLE READ on PostgreSQL (a read-only one never
    # fails to serialize), which is only set as a transaction's first statement; a SQLite
    # transaction reads one state of the database anyway.
    isolate = connection.vendor == "postgresql" and not connection.in_atomic_block
    with transaction.atomic():
        if isolate:
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        return _log_position(task_pk), send_answer(task_pk)


def _log_position(task_pk) -> int:
    return Task.objects.values_list("event_seq", flat=True).get(pk=task_pk)


def reply_dict(task: Task) -> dict:
    """The agent's Message that answered a message exchange, as it was streamed (naming no task)."""
    reply = message_dict(task.status_message, task.context.context_id)
    reply.pop("taskId", None)
    return reply


def _snapshot(
    task: Task,
    *,
    history_length: int | None,
    include_artifacts: bool = True,
    artifacts: list[Artifact] | None = None,
    history: list[tuple] | None = None,
) -> dict:
    """`history`: the page's rows read already (access.FoundTask.history), history_to_read(history_length)."""
    if history_length is None:
        history_length = DEFAULT_HISTORY_LENGTH
    # Hand-written SQL (tenants/sql.py): every GetTask and most answers read these.
    task_id = sql.prep(Message, "task", task.pk)
    page = []
    if history_length != 0:
        rows = history
        if rows is None:
            rows = sql.fetch_all(
                f"SELECT {sql.columns(Message, 'm', HISTORY_FIELDS)} FROM {sql.table(Message)} m "
                "WHERE m.task_id = %s ORDER BY m.created_at DESC, m.id DESC LIMIT %s",
                [task_id, history_to_read(history_length)],
            )
        page = _history_page(task, reversed(rows))[-history_length:]
    if not include_artifacts:
        artifacts = []
    elif artifacts is None:
        rows = sql.fetch_all(
            f"SELECT {sql.columns(Artifact, 'a')} FROM {sql.table(Artifact)} a WHERE a.task_id = %s "
            "ORDER BY a.created_at, a.id",
            [task_id],
        )
        artifacts = [sql.hydrate(Artifact, row) for row in rows]
    return task_dict(task, artifacts=artifacts, history_length=history_length, history=page)


def _history_page(task: Task, rows) -> list[dict]:
    """Rows of HISTORY_FIELDS, oldest first, as the answer shows them (protocol.convert.message_fields).

    Straight from the columns: no instance or record per message, the task's
    id converted once, not per row, and the JSON columns read as
    sql.json_value reads them ({} and [] without json.loads), every message's
    parts in one json.loads (sql.json_values). A hundred messages cost a third
    of what building records and rendering those did.
    """
    return _history_rows(str(task.pk), task.context.context_id, task.status_message_id, rows)


def _history_rows(task_id: str, context_id: str, status_message_pk, rows) -> list[dict]:
    """_history_page() of the task named by its id, its context's id and its status message's pk."""
    json_value = sql.json_value
    rows = [row for row in rows if row[0] != status_message_pk]
    every_parts = sql.json_values([row[3] for row in rows])
    return [
        message_fields(
            message_id,
            context_id,
            role,
            parts,
            task_id=task_id,
            metadata=json_value(metadata),
            extensions=json_value(extensions),
            reference_task_ids=json_value(reference_task_ids),
        )
        for (_, message_id, role, _, metadata, extensions, reference_task_ids), parts in zip(
            rows, every_parts, strict=True
        )
    ]


def with_history_length(snapshot: dict, history_length: int | None) -> dict:
    """A task_snapshot() with historyLength unset, cut down to `history_length` (at most the default)."""
    if history_length is None or "history" not in snapshot:
        return snapshot
    trimmed = {**snapshot, "history": snapshot["history"][-history_length:] if history_length else []}
    if not trimmed["history"]:
        del trimmed["history"]
    return trimmed


def tenant_tasks(tenant: Tenant) -> QuerySet[Task]:
    """Every task of the tenant, whoever called, with what a list row shows."""
    return Task.objects.filter(tenant=tenant).select_related(
        "agent", "context", "status_message", "draft_alias"
    )


def tasks_matching(
    tasks: QuerySet[Task],
    *,
    agent: str = "",
    state: str = "",
    context_id: str = "",
    owner: str = "",
    status_after: datetime | None = None,
    updated_after: datetime | None = None,
    text: str = "",
) -> QuerySet[Task]:
    """`tasks` narrowed by each filter given: agent slug, state, context, owner, times, text.

    `text` matches a task's id, the id a draft-dialect client chose for it, or a
    word in any of its messages or artifacts.
    """
    if agent:
        tasks = tasks.filter(agent__slug=agent)
    if state:
        tasks = tasks.filter(state=state)
    if context_id:
        tasks = tasks.filter(context__context_id=context_id)
    if owner:
        tasks = tasks.filter(owner=owner)
    if status_after:
        tasks = tasks.filter(status_timestamp__gte=status_after)
    if updated_after:
        tasks = tasks.filter(updated_at__gt=updated_after)
    if text:
        # Subqueries, not joins: a task with many matching messages stays one row.
        match = Exists(Message.objects.filter(task=OuterRef("pk"), parts__icontains=text)) | Exists(
            Artifact.objects.filter(task=OuterRef("pk"), parts__icontains=text)
        )
        # The draft dialect's client ids are unique per agent: one indexed lookup.
        match |= Exists(DraftTaskAlias.objects.filter(task=OuterRef("pk"), client_task_id=text))
        task_pk = parse_task_uuid(text)
        if task_pk is not None:
            match |= Q(pk=task_pk)
        tasks = tasks.filter(match)
    return tasks


def _page_token_at(status_timestamp: datetime, pk) -> str:
    """The position after a row of a list page: its status time and id (_parse_page_token)."""
    raw = json.dumps({"ts": status_timestamp.isoformat(), "id": str(pk)})
    return base64.urlsafe_b64encode(raw.encode()).decode()


def _parse_page_token(token: str) -> tuple[datetime, uuid.UUID]:
    """The position _page_token wrote; InvalidParams for anything else, whatever a caller made up.

    The time must carry its offset and convert to UTC (a year-1 time at +14:00
    does not), and both values must be strings: uuid.UUID(5) raises AttributeError.
    JSON nested thousands deep is refused by json.loads with a RecursionError.
    """
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        stamp, pk = data["ts"], data["id"]
        if not isinstance(stamp, str) or not isinstance(pk, str):
            raise TypeError("not strings")
        after = datetime.fromisoformat(stamp)
        if after.tzinfo is None:
            raise ValueError("no offset")
        return after.astimezone(UTC), uuid.UUID(pk)
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError):
        raise InvalidParamsError(message="pageToken is not one this server issued") from None


# ListTasks counts matching tasks exactly up to this many. Above, the answer (PostgreSQL's
# estimate, or on SQLite an exact count) is remembered for TOTAL_COUNTED_FOR seconds.
EXACT_TOTAL_UP_TO = 10_000
TOTAL_COUNTED_FOR = 10.0


def total_size(tasks: QuerySet[Task]) -> int:
    """How many tasks `tasks` holds: exact up to EXACT_TOTAL_UP_TO; above, an estimate or a recent count.

    An exact count reads every matching index entry, which grows with the
    table (120 ms at a million tasks on PostgreSQL, 150 on SQLite); counting at
    most EXACT_TOTAL_UP_TO + 1 keeps a list page's cost flat. Above that,
    PostgreSQL's planner estimate of the rows is the answer (never less than
    EXACT_TOTAL_UP_TO + 1); SQLite has no estimate to give, and counts. That
    answer is kept for TOTAL_COUNTED_FOR seconds for the same filters (this
    process's "list-totals" cache, settings.CACHES): a list that long is neither counted nor estimated again
    meanwhile, so paging through it, or listing it again, reads only its pages.
    """
    tasks = tasks.order_by()
    query, params = tasks.query.sql_with_params()
    key = "list-total:" + hashlib.sha256(f"{query}\0{params!r}".encode()).hexdigest()
    total = caches["list-totals"].get(key)
    if total is not None:
        return total
    total = tasks[: EXACT_TOTAL_UP_TO + 1].count()
    if total <= EXACT_TOTAL_UP_TO:
        return total
    if connection.vendor == "postgresql":
        total = max(EXACT_TOTAL_UP_TO + 1, _planner_estimate(tasks))
    else:
        total = tasks.count()
    caches["list-totals"].set(key, total, TOTAL_COUNTED_FOR)
    return total


def _planner_estimate(tasks: QuerySet[Task]) -> int:
    """PostgreSQL's estimate of the rows `tasks` holds (EXPLAIN, nothing read)."""
    sql, params = tasks.values("pk").query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    return int(plan[0]["Plan"]["Plan Rows"])


# What a ListTasks row reads of a task and its status message (values_list: no instances).
LIST_FIELDS = (
    "pk",
    "context__context_id",
    "state",
    "status_timestamp",
    "metadata",
    "status_message_id",
    "status_message__message_id",
    "status_message__role",
    "status_message__parts",
    "status_message__metadata",
    "status_message__extensions",
    "status_message__reference_task_ids",
)


def task_list(
    caller: Caller,
    *,
    context_id: str = "",
    state: str | None = None,
    status_after: datetime | None = None,
    page_size: int = 50,
    page_token: str = "",
    history_length: int | None = None,
    include_artifacts: bool = False,
) -> dict:
    """ListTasks: the caller's tasks, newest status first, in keyset pages.

    A fixed number of queries whatever the page size: count, page, the
    page's histories, its artifacts. totalSize is exact up to
    EXACT_TOTAL_UP_TO tasks (see total_size). Each task carries the newest
    DEFAULT_HISTORY_LENGTH messages when historyLength is unset, as GetTask
    does, and no more than it answers is read of any task (_histories), so a
    page of long conversations costs what a page of short ones does.

    Read as rows, not instances (LIST_FIELDS, HISTORY_FIELDS): a page of 50
    tasks built as models, with their status messages and a prefetch, cost
    the web process several times what the rows' values do.
    """
    # Not a task its caller has not been shown yet (Task.Reply.OPEN: a blocking call or stream
    # waiting for the agent's first word): a bare Message would make it an exchange, gone from the list.
    visible = tasks_visible_to(caller).exclude(reply=Task.Reply.OPEN)
    tasks = tasks_matching(visible, context_id=context_id, state=state or "", status_after=status_after)
    total = total_size(tasks)
    if page_token:
        after_ts, after_id = _parse_page_token(page_token)
        tasks = tasks.filter(Q(status_timestamp__lt=after_ts) | Q(status_timestamp=after_ts, pk__lt=after_id))
    if history_length is None:
        history_length = DEFAULT_HISTORY_LENGTH
    rows = list(tasks.order_by("-status_timestamp", "-pk").values_list(*LIST_FIELDS)[: page_size + 1])
    more = len(rows) > page_size
    rows = rows[:page_size]
    pks = [row[0] for row in rows]
    histories = _histories(rows, history_length) if history_length != 0 and rows else {}
    artifacts: dict = {pk: [] for pk in pks}
    if include_artifacts and pks:
        for artifact in Artifact.objects.filter(task_id__in=pks).order_by("created_at", "pk"):
            artifacts[artifact.task_id].append(artifact_dict(artifact))
    return {
        "tasks": [
            task_fields(
                str(pk),
                context,
                _list_status(pk, context, state, status_timestamp, message),
                artifacts=artifacts[pk],
                history=histories.get(pk),
                metadata=metadata,
            )
            for pk, context, state, status_timestamp, metadata, *message in rows
        ],
        "nextPageToken": _page_token_at(rows[-1][3], rows[-1][0]) if more else "",
        "pageSize": page_size,
        "totalSize": total,
    }


def _list_status(pk, context_id: str, state: str, status_timestamp: datetime, message: list) -> dict:
    """A ListTasks row's status (protocol.convert.status_dict, from LIST_FIELDS' values)."""
    message_pk, message_id, role, parts, metadata, extensions, reference_task_ids = message
    shown = None
    if message_pk is not None:
        shown = message_fields(
            message_id,
            context_id,
            role,
            parts,
            task_id=str(pk),
            metadata=metadata,
            extensions=extensions,
            reference_task_ids=reference_task_ids,
        )
    return status_fields(state, status_timestamp, shown)


def _histories(rows: list[tuple], history_length: int) -> dict:
    """The page's histories as answered: {task pk: its newest history_length messages, oldest first}.

    One statement, which reads no more than history_to_read(history_length)
    messages of each task, newest first, on the (task, created_at, id) index:
    a LATERAL subquery with a LIMIT per task on PostgreSQL, ROW_NUMBER over
    each task's messages on SQLite (no LATERAL there; embedded stores stay small).
    """
    ids = {sql.prep(Message, "task", row[0]): row for row in rows}
    columns, table, newest = (
        sql.columns(Message, "m", HISTORY_FIELDS),
        sql.table(Message),
        "m.created_at DESC, m.id DESC",
    )
    if connection.vendor == "postgresql":
        found = sql.fetch_all(
            f"SELECT {columns}, m.task_id FROM unnest(%s::uuid[]) AS p(id) CROSS JOIN LATERAL "
            f"(SELECT {columns}, m.task_id, m.created_at FROM {table} m WHERE m.task_id = p.id "
            f"ORDER BY {newest} LIMIT %s) m ORDER BY {newest}",
            [list(ids), history_to_read(history_length)],
        )
    else:
        marks = ", ".join(["%s"] * len(ids))
        found = sql.fetch_all(
            f"SELECT * FROM (SELECT {columns}, m.task_id, ROW_NUMBER() OVER (PARTITION BY m.task_id "
            f"ORDER BY {newest}) AS n FROM {table} m WHERE m.task_id IN ({marks})) h "
            "WHERE h.n <= %s ORDER BY h.n",
            [*ids, history_to_read(history_length)],
        )
        found = [row[:-1] for row in found]
    # Each task's rows newest first (both statements order them so), then oldest first.
    newest_first: dict = {key: [] for key in ids}
    for found_row in found:
        newest_first[found_row[-1]].append(found_row[:-1])
    histories = {}
    for key, messages in newest_first.items():
        pk, context_id, _, _, _, status_message_pk, *_ = ids[key]
        page = _history_rows(str(pk), context_id, status_message_pk, reversed(messages))
        histories[pk] = page[-history_length:]
    return histories


def principal_names(tenant: Tenant, principals) -> dict[str, str]:
    """Who "user:<pk>" and "client:<client_id>" are, for people to read: {principal: name}.

    Stored principals keep their format (tasks and messages are matched on it);
    this maps them to usernames and client names at render, in two queries at most.
    A client of another tenant is not named.
    """
    user_pks, client_ids, names = {}, {}, {}
    for principal in set(principals):
        kind, _, key = str(principal).partition(":")
        if kind == "user" and key.isdigit():
            user_pks[int(key)] = principal
        elif kind == "client" and key:
            client_ids[key] = principal
        names[principal] = str(principal)
    if user_pks:
        for pk, username in get_user_model().objects.filter(pk__in=user_pks).values_list("pk", "username"):
            names[user_pks[pk]] = username
    if client_ids:
        clients = Application.objects.filter(tenant=tenant, client_id__in=client_ids)
        for client_id, name in clients.values_list("client_id", "name"):
            names[client_ids[client_id]] = f"{name} (OAuth client)"
    return names


def first_requests(task_pks) -> dict:
    """The message that started each task (the caller's original request): {task_pk: Message}, one query."""
    first = Message.objects.filter(task=OuterRef("task"), role=Message.Role.USER).order_by("created_at", "pk")
    messages = Message.objects.filter(task__in=list(task_pks), role=Message.Role.USER).filter(
        pk=Subquery(first.values("pk")[:1])
    )
    return {message.task_id: message for message in messages}
