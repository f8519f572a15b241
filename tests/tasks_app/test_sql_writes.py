"""The engine's hot writes (tenants/sql.py) send no model signals: keep their models without receivers.

`sql.insert` and `sql.update` write Context, Task, Message, Artifact and
TaskEvent rows without save(), so a pre_save or post_save receiver on one of
them would silently miss those writes. Whoever adds one must first move the
writes back to the ORM, or send the signal there.

A page of history goes from its rows straight to ProtoJSON
(selectors._history_page), with no Message instance, so no init signal is sent
for those rows either.
"""

import json
import uuid
from datetime import UTC, datetime

import pytest
from django.db import connection, transaction
from django.db.models.signals import post_init, post_save, pre_init, pre_save
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from agents.models import Agent
from tasks_app.models import Artifact, Context, Message, PushDelivery, Task, TaskEvent
from tasks_app.protocol.convert import message_dict, timestamp
from tasks_app.selectors import task_snapshot
from tenants import sql


@pytest.mark.parametrize(
    "model", [Context, Task, Message, Artifact, TaskEvent, PushDelivery], ids=lambda model: model.__name__
)
def test_models_written_without_save_have_no_save_receivers(model):
    assert not pre_save.has_listeners(model)
    assert not post_save.has_listeners(model)


def test_a_history_page_shows_what_the_stored_messages_hold(stored):
    # No Message instance is built for a page's rows: an init receiver would miss them.
    assert not pre_init.has_listeners(Message) and not post_init.has_listeners(Message)
    agent = Agent.objects.select_related("tenant").get(tenant__slug="demo", slug="echo")
    with transaction.atomic():
        context = Context.objects.create(tenant=agent.tenant, owner="anonymous", context_id=str(uuid.uuid4()))
        task = Task.objects.create(
            tenant=agent.tenant,
            agent=agent,
            context=context,
            owner="anonymous",
            status_timestamp=timezone.now(),
        )
        common = {
            "tenant_id": task.tenant_id,
            "task": task,
            "context": task.context,
            "role": Message.Role.USER,
        }
        full = Message.objects.create(
            **common,
            message_id=f"record-{uuid.uuid4()}",
            parts=[{"text": "héllo"}, {"data": {"n": [1, 2.5, None, True], "e": {}, "l": []}}],
            metadata={"k": {"nested": "v"}},
            extensions=["https://example.test/ext"],
            reference_task_ids=[str(uuid.uuid4())],
        )
        # The JSON columns at their empty values, which are read without json.loads.
        empty = [
            Message.objects.create(**common, message_id=f"empty-{n}-{uuid.uuid4()}", parts=[])
            for n in range(2)
        ]
        answer = task_snapshot(task.pk)
        # What the ORM reads back, rendered one instance at a time.
        instances = list(Message.objects.filter(task=task).order_by("created_at", "id"))
        transaction.set_rollback(True)
    assert [m.pk for m in instances] == [m.pk for m in [full, *empty]]
    assert instances[1].metadata == {} and instances[1].extensions == [] and instances[1].parts == []
    assert answer["history"] == [message_dict(m, context.context_id) for m in instances]
    assert answer["history"][0]["metadata"] == {"k": {"nested": "v"}}
    # The history's messages name their task (its id is not read per row, but set).
    assert {m["taskId"] for m in answer["history"]} == {str(task.pk)}


def test_json_values_read_fast_are_the_orms_and_never_shared():
    for text in ("{}", "[]", '{"a": [1, {}]}', "[{}, []]", '"text"', "3.5", "null"):
        assert sql.json_value(text) == json.loads(text)
    assert sql.json_value(None) is None
    # Each empty container is a new one: changing one changes no other.
    assert sql.json_value("{}") is not sql.json_value("{}")
    assert sql.json_value("[]") is not sql.json_value("[]")


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@given(st.lists(JSON, max_size=6))
def test_many_json_texts_decode_at_once_as_each_alone(values):
    texts = [json.dumps(value) for value in values]
    assert sql.json_values(texts) == [sql.json_value(text) for text in texts]


def test_json_texts_beyond_a_double_decode_as_the_orm_decodes_them():
    # Django's JSONField writes NaN and Infinity (json.dumps), and integers of any size: each
    # comes back as it went in (orjson, say, would read an integer past 64 bits as a float).
    for text in ("123456789012345678901234567890", "-9223372036854775809", '{"n": 18446744073709551616}'):
        assert repr(sql.json_values([text, '{"a": 1}'])) == repr([json.loads(text), {"a": 1}])
    texts = ['{"score": NaN}', "[Infinity, -Infinity]"]
    assert repr(sql.json_values(texts)) == repr([json.loads(text) for text in texts])


NOT_JSON = st.sampled_from(["1,2", "[1", "nope", '"a"]["b"'])


@given(st.lists(st.one_of(JSON.map(json.dumps), NOT_JSON), max_size=6))
def test_texts_that_are_not_json_each_are_decoded_one_at_a_time(texts):
    # A JSONField stores JSON only. Should a text not be, it is kept as it is (json_value) and
    # does not merge with its neighbours ("1,2" alone is no JSON; joined, it would be two values).
    assert sql.json_values(texts) == [sql.json_value(text) for text in texts]


# Hypothesis takes naive bounds, and gives aware values in the timezones asked for.
@given(st.datetimes(min_value=datetime(1000, 1, 1), timezones=st.just(UTC)))  # noqa: DTZ001
def test_a_timestamp_is_its_utc_time_to_the_millisecond(value):
    printed = timestamp(value)
    assert printed.endswith("Z") and len(printed) == len("2026-12-03T19:04:18.447Z")
    assert datetime.fromisoformat(printed[:-1] + "+00:00") == value.replace(
        microsecond=value.microsecond // 1000 * 1000
    )


def test_insert_all_writes_each_list_and_gives_each_row_its_key(stored):
    """sql.insert_all: several models' new rows in one statement on PostgreSQL, each list's keys in order."""
    agent = Agent.objects.select_related("tenant").get(tenant__slug="demo", slug="echo")
    with transaction.atomic():
        context = Context.objects.create(tenant=agent.tenant, owner="anonymous", context_id=str(uuid.uuid4()))
        task = Task(
            tenant=agent.tenant,
            agent=agent,
            context=context,
            owner="anonymous",
            status_timestamp=timezone.now(),
            event_seq=2,
        )
        messages = [
            Message(
                tenant=agent.tenant,
                task=task,
                context=context,
                role=Message.Role.AGENT,
                message_id=f"all-{n}",
                parts=[{"text": f"part {n}"}],
            )
            for n in range(3)
        ]
        events = [TaskEvent(task=task, seq=n, kind=TaskEvent.Kind.STATUS, payload={"n": n}) for n in (1, 2)]
        with CaptureQueriesContext(connection) as queries:
            sql.insert_all([[task], messages, [], events])
        assert len(queries.captured_queries) == (1 if connection.vendor == "postgresql" else 3)
        stored_messages = {m.pk: m.message_id for m in Message.objects.filter(task=task)}
        assert stored_messages == {m.pk: m.message_id for m in messages}
        assert sorted(stored_messages) == [m.pk for m in messages]  # keys given back in the list's order
        stored_events = TaskEvent.objects.filter(task=task).order_by("seq")
        assert [event.payload for event in stored_events] == [{"n": 1}, {"n": 2}]
        assert all(not obj._state.adding for obj in [task, *messages, *events])
        assert Task.objects.get(pk=task.pk).updated_at == task.updated_at  # auto_now filled, as save()
        transaction.set_rollback(True)


def test_statements_go_to_postgresql_numbered_as_it_numbers_them():
    assert sql._numbered("SELECT %s, %s") == "SELECT $1, $2"
    assert sql._numbered("SELECT " + ", ".join(["%s"] * 11)).endswith("$9, $10, $11")
    assert sql._numbered("SELECT '100%%' || %s") == "SELECT '100%' || $1"


@pytest.mark.parametrize("statement", ["SELECT %(name)s", "SELECT %b", "SELECT 5 % 2", "SELECT 5 %"])
def test_any_other_percent_sign_is_refused_as_psycopg_refuses_it(statement):
    with pytest.raises(ValueError, match="only %s placeholders"):
        sql._numbered(statement)


def test_insert_all_runs_updates_in_the_same_statement_and_counts_their_rows(stored):
    agent = Agent.objects.select_related("tenant").get(tenant__slug="demo", slug="echo")
    with transaction.atomic():
        context = Context.objects.create(tenant=agent.tenant, owner="anonymous", context_id=str(uuid.uuid4()))
        now = timezone.now()
        task = Task.objects.create(
            tenant=agent.tenant, agent=agent, context=context, owner="anonymous", status_timestamp=now
        )
        events = [TaskEvent(task=task, seq=1, kind=TaskEvent.Kind.STATUS, payload={"n": 1})]
        task.event_seq = 1
        renamed = f"UPDATE {sql.table(Context)} SET owner = %s WHERE id = %s"
        with CaptureQueriesContext(connection) as queries:
            counts = sql.insert_all(
                [events], also=[sql.update_statement(task, ["event_seq"]), (renamed, ["someone", -1])]
            )
        assert counts == [1, 0]  # the task's row; no context has id -1
        assert len(queries.captured_queries) == (1 if connection.vendor == "postgresql" else 3)
        assert Task.objects.get(pk=task.pk).event_seq == 1
        assert list(TaskEvent.objects.filter(task=task).values_list("seq", flat=True)) == [1]
        transaction.set_rollback(True)


def test_an_insert_of_more_values_than_a_statement_binds_is_split_and_keeps_every_key(stored):
    """sql.insert and insert_all: rows past most_values() go in further statements, keyed in order."""
    agent = Agent.objects.select_related("tenant").get(tenant__slug="demo", slug="echo")
    context = Context.objects.create(tenant=agent.tenant, owner="anonymous", context_id=str(uuid.uuid4()))
    task = Task.objects.create(
        tenant=agent.tenant, agent=agent, context=context, owner="anonymous", status_timestamp=timezone.now()
    )
    count = sql.most_values(connection) // sql.width(TaskEvent) + 7
    events = [TaskEvent(task=task, seq=n, kind=TaskEvent.Kind.STATUS, payload={"n": n}) for n in range(count)]
    more = [TaskEvent(task=task, seq=count + n, kind=TaskEvent.Kind.STATUS, payload={}) for n in range(3)]
    with transaction.atomic():
        sql.insert(events)
        sql.insert_all(
            [more, [TaskEvent(task=task, seq=2 * count + n, kind="status", payload={}) for n in range(count)]]
        )
    stored_keys = dict(TaskEvent.objects.filter(task=task).values_list("seq", "pk"))
    assert len(stored_keys) == 2 * count + 3
    assert [event.pk for event in events + more] == [stored_keys[event.seq] for event in events + more]
