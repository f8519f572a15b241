"""Every statement of a task's life reads the rows it needs, not every task of the agent.

On PostgreSQL, whatever the planner knows: the suite's tables are new and, on a
server with autovacuum off (as CI's is), never analyzed. Without statistics the
planner once chose the (tenant, agent) index for GetTask's lookup of one task
and read every task of the agent. Here 300 other tasks of the same tenant,
agent, caller and context are stored beside the one the flow uses; every
SELECT, UPDATE and WITH the flow ran is explained with ANALYZE (inside the test's
transaction, rolled back), and no scan of a task table may read more than a
handful of rows.
"""

import asyncio
import uuid

import pytest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import TaskNotCancelableError
from django.db import connection, transaction
from django.utils import timezone
from psycopg import RawCursor

from agents.registry import build_executor
from tasks_app.access import (
    get_agent_and_task,
    get_task_for_caller,
    get_task_for_tenant,
    task_and_artifacts_for_caller,
)
from tasks_app.events import _state_and_events_after
from tasks_app.models import Artifact, Message, Task, TaskEvent, TaskState
from tasks_app.selectors import task_list
from tasks_app.services import task_cancel
from tasks_app.turns import events_store, turn_claim
from tasks_app.turns.setup import Claim, _prepare, claim_and_prepare
from tests.tasks_app.test_query_counts import (
    Collecting,
    _add_history,
    _caller,
    _first_turn,
    _in_rollback,
    _send,
    _stored_answer,
)

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="query plans are PostgreSQL's (services mode)"
)

OTHER_TASKS = 300
# The task's own rows: a few messages, events and artifacts, never the other tasks'.
ROWS_READ_MAX = 10
TASK_TABLES = {"tasks_app_task", "tasks_app_message", "tasks_app_taskevent", "tasks_app_artifact"}


def _store_other_tasks(task: Task) -> None:
    """OTHER_TASKS tasks beside `task`, each with a message, an event and an artifact, all in bulk."""
    now = timezone.now()
    others = Task.objects.bulk_create(
        Task(
            tenant_id=task.tenant_id,
            agent_id=task.agent_id,
            context_id=task.context_id,
            owner=task.owner,
            state=TaskState.COMPLETED,
            status_timestamp=now,
        )
        for _ in range(OTHER_TASKS)
    )
    Message.objects.bulk_create(
        Message(
            tenant_id=task.tenant_id,
            task=other,
            context_id=task.context_id,
            message_id=str(uuid.uuid4()),
            role=Message.Role.USER,
            parts=[{"text": "another"}],
            created_at=now,
        )
        for other in others
    )
    TaskEvent.objects.bulk_create(
        TaskEvent(task=other, seq=1, kind=TaskEvent.Kind.TASK, payload={}) for other in others
    )
    Artifact.objects.bulk_create(
        Artifact(task=other, artifact_id="answer", parts=[{"text": "another"}]) for other in others
    )


def _flow(caller) -> None:
    """A task's life as the engine runs it: send, a turn asking for input, the answer, its turn, reads."""
    outcome = _send(caller)
    task_pk = str(outcome.task.pk)
    _store_other_tasks(outcome.task)
    first = _first_turn(outcome)
    # The first turn as a worker claims it (on PostgreSQL, with its read in one statement).
    turn, executor, context, view = claim_and_prepare(task_pk, first, Claim())
    asked = pb.TaskStatusUpdateEvent(
        task_id=task_pk,
        status=pb.TaskStatus(
            state=pb.TASK_STATE_INPUT_REQUIRED,
            message=pb.Message(message_id="ask", role=pb.ROLE_AGENT, parts=[pb.Part(text="more?")]),
        ),
    )
    assert events_store(turn, [asked], view) == "input-required"
    _send(caller, text="more", task_id=task_pk)
    second = Message.objects.filter(task=outcome.task, role=Message.Role.USER).latest("pk").pk
    claim = Claim()
    assert turn_claim(task_pk, second, claim.start())
    turn, executor, context, view = _prepare(task_pk, second, claim)
    queue = Collecting()
    asyncio.run(build_executor(caller.agent).execute(context, queue))
    assert events_store(turn, queue.events, view) == "completed"
    answer = _stored_answer(caller, task_pk)
    assert answer["status"]["state"] == "TASK_STATE_COMPLETED"
    # A binding's GetTask: the task read with its agent (by the agent's slugs, the task's id).
    agent, read = get_agent_and_task(caller.tenant.slug, caller.agent.slug, task_pk, history=101)
    assert task_and_artifacts_for_caller(read, caller)[0].pk == outcome.task.pk
    # A stream's look at the log, as a resuming subscriber or a waiting caller takes it.
    state, events = _state_and_events_after(outcome.task.pk, 1)
    assert state == TaskState.COMPLETED and len(events) >= 3
    assert get_task_for_caller(caller, task_pk, for_update=True).pk == outcome.task.pk
    assert get_task_for_tenant(caller.tenant, task_pk, for_update=True).pk == outcome.task.pk
    with pytest.raises(TaskNotCancelableError):
        task_cancel(caller, task_pk)


def _scans(plan: dict):
    """Every node of an EXPLAIN (FORMAT JSON) plan that reads a relation."""
    if "Relation Name" in plan:
        yield plan
    for child in plan.get("Plans", []):
        yield from _scans(child)


def _explained(statement: str, params) -> dict:
    # ANALYZE runs the statement: in a savepoint of its own, undone at once. tenants/sql.py
    # sends its statements numbered ($1, $2, ...), on a cursor that takes them so.
    with transaction.atomic():
        numbered = "%s" not in statement  # as tenants/sql.py sends its own
        with RawCursor(connection.connection) if numbered else connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", params)
            plan = cursor.fetchone()[0]
        transaction.set_rollback(True)
    return plan[0]["Plan"]


def test_no_statement_of_a_task_reads_the_other_tasks_of_its_agent(stored):
    caller = _caller()
    ran: list[tuple[str, object]] = []
    plans: list[tuple[str, dict]] = []

    def capture(execute, statement, params, many, context):
        head = statement.lstrip().upper()
        if head.startswith("WITH"):
            # The turn's claim with its read changes the row it reads: explained before it
            # runs, while the turn is still pending (afterwards its UPDATE would match nothing).
            plans.append((statement, _explained(statement, params)))
        elif head.startswith(("SELECT", "UPDATE", "DELETE")):
            ran.append((statement, params))
        return execute(statement, params, many, context)

    reads: list[tuple[int, str, str]] = []

    def work():
        with connection.execute_wrapper(capture):
            _flow(caller)
        assert [statement for statement, _ in plans if "RETURNING" in statement], plans
        plans.extend((statement, _explained(statement, params)) for statement, params in ran)
        for statement, plan in plans:
            for scan in _scans(plan):
                if scan["Relation Name"] in TASK_TABLES:
                    rows = scan["Actual Rows"] * scan["Actual Loops"] + scan.get("Rows Removed by Filter", 0)
                    reads.append((rows, scan["Relation Name"], statement))

    _in_rollback(work)
    # The flow ran (19 statements besides the claim since a task's webhook count is a column of
    # its row: the follow-up's log entry no longer asks for the task's configs).
    assert len(ran) >= 19, ran
    assert {table for _, table, _ in reads} == TASK_TABLES
    too_many = [(rows, table, statement[:300]) for rows, table, statement in reads if rows > ROWS_READ_MAX]
    assert not too_many, too_many


# The messages of a long conversation, stored in batches that share their created_at.
LONG_HISTORY = 300


def _generic_plan(statement: str, params) -> dict:
    """`statement` prepared and explained with ANALYZE under its generic plan.

    The one PostgreSQL settles on after its first five runs of a statement
    psycopg prepares (DB_PREPARE_THRESHOLD), when it costs no more than the
    custom ones. Not the custom plan of one run: on the suite's tables, never
    analyzed, that one may sort a task's every message to keep a few.
    """
    placeholders = ", ".join(["%s"] * len(params))
    with connection.cursor() as cursor:
        cursor.execute(f"PREPARE planned AS {statement}")  # numbered already (tenants/sql.py)
        try:
            cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE planned({placeholders})", params)
            return cursor.fetchone()[0][0]["Plan"]
        finally:
            cursor.execute("DEALLOCATE planned")


def _the_statement(marker: str, run):
    """run()'s answer, and the one statement it ran that holds `marker` (with its parameters)."""
    ran: list[tuple[str, object]] = []

    def capture(execute, statement, params, many, context):
        if marker in statement:
            ran.append((statement, params))
        return execute(statement, params, many, context)

    with connection.execute_wrapper(capture):
        answer = run()
    [(statement, params)] = ran
    return answer, statement, params


def _message_rows_read(plan: dict) -> list[int]:
    """The rows each scan of the message table in `plan` read (kept and filtered out)."""
    scans = [scan for scan in _scans(plan) if scan["Relation Name"] == "tasks_app_message"]
    assert scans, plan
    return [
        scan["Actual Rows"] * scan["Actual Loops"] + scan.get("Rows Removed by Filter", 0) for scan in scans
    ]


def test_a_page_of_history_reads_only_the_page_once_prepared(stored):
    """GetTask's page of history is an ordered index scan that stops at the page, however long the history.

    Prepared, as psycopg prepares a statement a connection runs often
    (DB_PREPARE_THRESHOLD), and explained with its generic plan: the one
    PostgreSQL settles on after its first five runs of a prepared statement,
    when that plan costs no more than the custom ones (here a quarter).
    """
    caller = _caller()

    def work():
        outcome = _send(caller)
        _add_history(caller, outcome.task, LONG_HISTORY)
        answer, statement, params = _the_statement(
            "ORDER BY m.created_at DESC", lambda: _stored_answer(caller, str(outcome.task.pk))
        )
        plan = _generic_plan(statement, params)
        page = len(answer["history"])
        assert page == 100
        for read in _message_rows_read(plan):
            assert read <= page + 1, plan

    _in_rollback(work)


def test_a_list_page_reads_no_more_of_each_tasks_history_than_it_answers(stored):
    """ListTasks' histories, once prepared: a LIMIT per task on the message index, not every message."""
    caller = _caller()

    def work():
        long, short = _send(caller), _send(caller)
        _add_history(caller, long.task, LONG_HISTORY)
        page, statement, params = _the_statement("LATERAL", lambda: task_list(caller, history_length=5))
        histories = {task["id"]: len(task.get("history", [])) for task in page["tasks"]}
        assert histories == {str(long.task.pk): 5, str(short.task.pk): 1}
        plan = _generic_plan(statement, params)
        for read in _message_rows_read(plan):
            # Six of each task at most (the page, and one for a status message it leaves out).
            assert read <= 2 * 6, plan

    _in_rollback(work)
