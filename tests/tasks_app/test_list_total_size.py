"""ListTasks' totalSize: exact for small lists, never a count of the whole table for huge ones."""

import time
import uuid

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.models import Agent
from tasks_app import selectors
from tasks_app.access import Caller
from tasks_app.models import Context, Task


def _tasks_of_a_new_caller(count: int) -> Caller:
    agent = Agent.objects.select_related("tenant").get(tenant__slug="demo", slug="echo")
    caller = Caller(tenant=agent.tenant, agent=agent, principal=f"client:counted-{uuid.uuid4()}")
    _more_tasks_of(caller, count)
    return caller


def _more_tasks_of(caller: Caller, count: int) -> None:
    context = Context.objects.create(tenant=caller.tenant, context_id=f"counted-{uuid.uuid4()}")
    Task.objects.bulk_create(
        Task(
            tenant=caller.tenant,
            agent=caller.agent,
            context=context,
            owner=caller.principal,
            status_timestamp=timezone.now(),
        )
        for _ in range(count)
    )


def _counted(queries) -> list[str]:
    """The statements that counted or estimated: COUNTs and EXPLAINs."""
    statements = [q["sql"] or "" for q in queries.captured_queries]  # a prepared statement may show None
    return [sql for sql in statements if "COUNT(" in sql.upper() or sql.startswith("EXPLAIN")]


def test_total_size_is_exact_up_to_the_cap(stored, monkeypatch):
    monkeypatch.setattr(selectors, "EXACT_TOTAL_UP_TO", 5)
    for count in (0, 3, 5):
        caller = _tasks_of_a_new_caller(count)
        assert selectors.task_list(caller, page_size=2)["totalSize"] == count


def test_total_size_above_the_cap_is_bounded_work_and_never_below_the_cap(stored, monkeypatch):
    monkeypatch.setattr(selectors, "EXACT_TOTAL_UP_TO", 5)
    caller = _tasks_of_a_new_caller(9)
    with CaptureQueriesContext(connection) as queries:
        total = selectors.task_list(caller, page_size=2)["totalSize"]
    if connection.vendor == "postgresql":
        assert total >= 6
        counted = _counted(queries)
        counts = [sql for sql in counted if not sql.startswith("EXPLAIN")]
        # The count reads at most cap + 1 rows; the rest is the planner's estimate.
        assert counts and all("LIMIT 6" in sql for sql in counts), counted
        assert any(sql.startswith("EXPLAIN") for sql in counted), counted
    else:
        assert total == 9


def test_total_size_above_the_cap_is_remembered_for_moments(stored, monkeypatch):
    monkeypatch.setattr(selectors, "EXACT_TOTAL_UP_TO", 5)
    monkeypatch.setattr(selectors, "TOTAL_COUNTED_FOR", 2.0)
    caller = _tasks_of_a_new_caller(9)
    first = selectors.task_list(caller, page_size=2)["totalSize"]
    _more_tasks_of(caller, 2)
    with CaptureQueriesContext(connection) as queries:
        # The next page of the same list, moments later: nothing counted or estimated again.
        assert selectors.task_list(caller, page_size=2)["totalSize"] == first
    assert _counted(queries) == []
    time.sleep(2.1)
    with CaptureQueriesContext(connection) as queries:
        later = selectors.task_list(caller, page_size=2)["totalSize"]
    assert any("LIMIT 6" in sql for sql in _counted(queries)), _counted(queries)
    if connection.vendor == "postgresql":
        assert later >= 6
    else:
        assert (first, later) == (9, 11)
