"""A stream's first Task and the log position it stands for are read as of one moment.

SubscribeToTask, and the stream of a follow-up message, send the task as it is
and then the log after its event_seq. If a batch committed between reading
the two, its events would be both in that Task and after that position: sent
twice, an artifact's appended chunk applied twice by the client.
"""

import threading
import uuid

from django.db import connection
from django.db.models import F
from django.utils import timezone

from agents.models import Agent
from tasks_app import selectors
from tasks_app.models import Context, Task


def test_a_batch_committed_between_the_reads_comes_after_the_snapshot_not_in_it(stored, monkeypatch):
    agent = Agent.objects.select_related("tenant").get(tenant__slug="demo", slug="echo")
    context = Context.objects.create(tenant=agent.tenant, context_id=f"position-{uuid.uuid4()}")
    task = Task.objects.create(
        tenant=agent.tenant, agent=agent, context=context, owner="anonymous", status_timestamp=timezone.now()
    )
    before = Task.objects.get(pk=task.pk).event_seq
    read_answer = selectors.send_answer
    writers = []

    def batch(task_pk):
        try:
            Task.objects.filter(pk=task_pk).update(event_seq=F("event_seq") + 1, metadata={"late": True})
        finally:
            connection.close()

    def a_batch_commits_between(task_pk, **options):
        # A worker's batch, on a connection of its own, after the position was read. On
        # PostgreSQL it commits at once; on SQLite it waits for the reads' transaction.
        writers.append(threading.Thread(target=batch, args=[task_pk]))
        writers[0].start()
        writers[0].join(1)
        return read_answer(task_pk, **options)

    monkeypatch.setattr(selectors, "send_answer", a_batch_commits_between)

    seq, answer = selectors.send_answer_at(task.pk)

    writers[0].join(10)
    assert Task.objects.get(pk=task.pk).event_seq == before + 1  # the batch did commit
    assert seq == before
    assert "late" not in answer["task"].get("metadata", {}), answer
