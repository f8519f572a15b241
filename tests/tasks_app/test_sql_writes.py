"""The engine's hot writes (tenants/sql.py) send no model signals: keep their models without receivers.

`sql.insert` and `sql.update` write Context, Task, Message, Artifact and
TaskEvent rows without save(), so a pre_save or post_save receiver on one of
them would silently miss those writes. Whoever adds one must first move the
writes back to the ORM, or send the signal there.

A page of history is read as records (`sql.records`), not Message instances,
so no init signal is sent for those rows either.
"""

import uuid

import pytest
from django.db import transaction
from django.db.models.signals import post_init, post_save, pre_init, pre_save
from django.utils import timezone

from agents.models import Agent
from tasks_app.models import Artifact, Context, Message, Task, TaskEvent
from tasks_app.selectors import HISTORY_FIELDS, task_snapshot
from tenants import sql


@pytest.mark.parametrize(
    "model", [Context, Task, Message, Artifact, TaskEvent], ids=lambda model: model.__name__
)
def test_models_written_without_save_have_no_save_receivers(model):
    assert not pre_save.has_listeners(model)
    assert not post_save.has_listeners(model)


def test_history_records_hold_what_the_instances_would(stored):
    assert not pre_init.has_listeners(Message) and not post_init.has_listeners(Message)
    agent = Agent.objects.select_related("tenant").get(tenant__slug="demo", slug="echo")
    columns = sql.columns(Message, "m", HISTORY_FIELDS)
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
        rows = sql.fetch_all(
            f"SELECT {columns} FROM {sql.table(Message)} m WHERE m.task_id = %s ORDER BY m.id",
            [sql.prep(Message, "task", task.pk)],
        )
        answer = task_snapshot(task.pk)
        transaction.set_rollback(True)
    stored_messages = [full, *empty]
    one_by_one = [sql.record(Message, row, names=HISTORY_FIELDS) for row in rows]
    for found in (sql.records(Message, rows, names=HISTORY_FIELDS), one_by_one):
        assert [record.pk for record in found] == [message.pk for message in stored_messages]
        for record, row, message in zip(found, rows, stored_messages, strict=True):
            instance = sql.hydrate(Message, row, names=HISTORY_FIELDS)
            for name in HISTORY_FIELDS:
                assert getattr(record, name) == getattr(instance, name) == getattr(message, name), name
    assert empty[0].metadata == {} and empty[0].extensions == [] and empty[0].parts == []
    # Each record has containers of its own: changing one changes no other.
    first, second = sql.records(Message, rows[1:], names=HISTORY_FIELDS)
    first.metadata["changed"] = True
    first.extensions.append("x")
    assert second.metadata == {} and second.extensions == []
    # The history's messages name their task (its id is not read per row, but set).
    assert [m["messageId"] for m in answer["history"]] == [m.message_id for m in stored_messages]
    assert {m["taskId"] for m in answer["history"]} == {str(task.pk)}
