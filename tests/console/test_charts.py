"""The charts' numbers: tasks per hour by final state and turn-duration percentiles, last 24 h.

Rows are made through the ORM at known times (tasks ended in given hours, turns
of known lengths), on whichever database the session runs (SQLite or PostgreSQL),
then read back as the charts and the pages that draw them.
"""

import uuid
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from a2a_platform.console.charts import HOURS, activity_chart, percentile
from agents.models import Agent
from tasks_app.models import Context, Message, Task, TaskState
from tenants.models import Membership, Tenant
from tests.console.conftest import orm

NOW = timezone.now().replace(minute=30, second=0, microsecond=0)


def _task(tenant, agent, state, ended, turn_seconds=None) -> Task:
    context = Context.objects.create(tenant=tenant, context_id=str(uuid.uuid4()))
    task = Task.objects.create(
        tenant=tenant, agent=agent, context=context, state=state, status_timestamp=ended
    )
    if turn_seconds is not None:
        Message.objects.create(
            tenant=tenant,
            task=task,
            context=context,
            message_id=f"m-{uuid.uuid4()}",
            role="user",
            turn="done",
            turn_started_at=ended - timedelta(seconds=turn_seconds),
            turn_finished_at=ended,
        )
    return task


def _tenant_with_history() -> tuple[Tenant, Agent, Agent]:
    tenant, _ = Tenant.objects.get_or_create(slug="chartco", defaults={"name": "Chart Co"})
    Task.objects.filter(tenant=tenant).delete()
    one = Agent.objects.get_or_create(tenant=tenant, slug="one", defaults={"name": "One", "handler": "echo"})[
        0
    ]
    two = Agent.objects.get_or_create(tenant=tenant, slug="two", defaults={"name": "Two", "handler": "echo"})[
        0
    ]
    # This hour: 3 completed (turns of 1, 2 and 10 s) and 1 failed, of agent one; 1 completed of agent two.
    for seconds in (1, 2, 10):
        _task(tenant, one, TaskState.COMPLETED, NOW - timedelta(minutes=5), turn_seconds=seconds)
    _task(tenant, one, TaskState.FAILED, NOW - timedelta(minutes=10), turn_seconds=4)
    _task(tenant, two, TaskState.COMPLETED, NOW - timedelta(minutes=1), turn_seconds=30)
    # Five hours ago: 2 canceled and 1 rejected.
    for state in (TaskState.CANCELED, TaskState.CANCELED, TaskState.REJECTED):
        _task(tenant, one, state, NOW - timedelta(hours=5))
    # Not counted: still waiting, or ended more than a day ago.
    _task(tenant, one, TaskState.INPUT_REQUIRED, NOW - timedelta(minutes=2))
    _task(tenant, one, TaskState.COMPLETED, NOW - timedelta(hours=30), turn_seconds=99)
    return tenant, one, two


def _by_hour(chart) -> dict[int, dict[str, int]]:
    """{hours ago: {state: count}} of the bars that have any."""
    last = chart.bars[-1].hour
    return {
        int((last - bar.hour).total_seconds() // 3600): {seg.state: seg.count for seg in bar.segments}
        for bar in chart.bars
        if bar.segments
    }


def test_tasks_per_hour_count_final_states_of_the_last_day(stored):
    tenant, one, two = orm(_tenant_with_history)
    chart = orm(activity_chart, tenant, now=NOW)
    assert len(chart.bars) == HOURS
    assert _by_hour(chart) == {0: {"completed": 4, "failed": 1}, 5: {"canceled": 2, "rejected": 1}}
    assert chart.tasks_total == 8
    # Stacked: the segments of a bar sit on each other, the tallest bar reaches the axis' top or below.
    newest = chart.bars[-1]
    completed, failed = newest.segments
    assert completed.y == failed.y + failed.height
    assert completed.y + completed.height == chart.baseline
    assert float(chart.bar_ticks[-1].value) >= newest.total

    only_two = orm(activity_chart, tenant, agent=two, now=NOW)
    assert _by_hour(only_two) == {0: {"completed": 1}}


def test_turn_durations_give_the_days_percentiles(stored):
    tenant, one, _two = orm(_tenant_with_history)
    chart = orm(activity_chart, tenant, now=NOW)
    assert chart.turns_counted == 5  # the 99 s turn ended 30 hours ago
    day = {line.percentile: line.day_value for line in chart.lines}
    assert day[50] == 4.0
    assert day[90] == percentile([1.0, 2.0, 4.0, 10.0, 30.0], 90) == 22.0
    assert 29 < day[99] < 30
    # One hour had turns: one dot per percentile line, and the hour's row in the table says 5.
    assert [len(line.dots) for line in chart.lines] == [1, 1, 1]
    assert chart.rows[-1]["turns"] == 5 and chart.rows[-1]["percentiles"][0] == "4.0 s"

    agent_one = orm(activity_chart, tenant, agent=one, now=NOW)
    assert {line.percentile: line.day_value for line in agent_one.lines}[50] == 3.0


def test_no_history_draws_empty_charts(stored):
    tenant = orm(lambda: Tenant.objects.get_or_create(slug="quietco", defaults={"name": "Quiet"})[0])
    chart = orm(activity_chart, tenant, now=NOW)
    assert chart.tasks_total == 0 and chart.turns_counted == 0
    assert all(not bar.segments for bar in chart.bars)
    assert all(line.points == "" and line.day_value is None for line in chart.lines)


def _dashboard_and_agent_page() -> tuple[str, str, int]:
    user, _ = get_user_model().objects.get_or_create(username="chart-owner")
    tenant = Tenant.objects.get(slug="chartco")
    Membership.objects.update_or_create(user=user, tenant=tenant, defaults={"role": Membership.Role.VIEWER})
    client = Client()
    client.force_login(user)
    with CaptureQueriesContext(connection) as queries:
        dashboard = client.get("/console/t/chartco/")
    agent = client.get("/console/t/chartco/agents/two/")
    assert dashboard.status_code == 200 and agent.status_code == 200
    return dashboard.content.decode(), agent.content.decode(), len(queries)


def test_the_dashboard_and_agent_pages_draw_the_charts_as_svg(stored):
    orm(_tenant_with_history)
    dashboard, agent, queries = orm(_dashboard_and_agent_page)
    assert dashboard.count('data-state="completed"') == 1 and 'data-state="canceled"' in dashboard
    assert dashboard.count("<polyline") == 3
    assert "5 turns" in dashboard
    # The agent page counts that agent's tasks only: agent two ended one completed task.
    assert agent.count('data-state="completed"') == 1 and 'data-state="failed"' not in agent
    assert "1 ended" in agent and "1 turn)" in agent
    # Bounded: the charts add two queries to the dashboard, whatever the history.
    assert queries <= 12, queries
