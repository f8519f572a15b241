"""A stream's first Task and the log position it stands for are read as of one moment.

SubscribeToTask, and the stream of a follow-up message, send the task as it is
and then the log after its event_seq. If a batch committed between reading
the two, its events would be both in that Task and after that position: sent
twice, an artifact's appended chunk applied twice by the client.
"""

import threading
import uuid

import pytest
from django.db import connection
from django.db.models import F
from django.utils import timezone

from agents.models import Agent
from tasks_app import selectors
from tasks_app.models import Context, Task


@pytest.fixture
def task(stored) -> Task:
    agent = Agent.objects.select_related("tenant").get(tenant__slug="demo", slug="echo")
    context = Context.objects.create(tenant=agent.tenant, context_id=f"position-{uuid.uuid4()}")
    return Task.objects.create(
        tenant=agent.tenant, agent=agent, context=context, owner="anonymous", status_timestamp=timezone.now()
    )


def _batch(task_pk, n: int) -> None:
    """A worker's batch, on a connection of its own: the log moves, the task changes with it."""
    try:
        Task.objects.filter(pk=task_pk).update(event_seq=F("event_seq") + 1, metadata={"batch": n})
    finally:
        connection.close()


def _batches_between_reads(monkeypatch, reads_with_a_batch: int) -> list[threading.Thread]:
    """The first `reads_with_a_batch` reads of the snapshot each have a batch commit just before them."""
    read_answer = selectors.send_answer
    writers: list[threading.Thread] = []

    def a_batch_commits_first(task_pk, **options):
        if len(writers) < reads_with_a_batch:
            writers.append(threading.Thread(target=_batch, args=[task_pk, len(writers) + 1]))
            writers[-1].start()
            # On PostgreSQL it commits at once; in the fallback's transaction on SQLite it waits for it.
            writers[-1].join(1)
        return read_answer(task_pk, **options)

    monkeypatch.setattr(selectors, "send_answer", a_batch_commits_first)
    return writers


def _metadata(answer: dict) -> dict:
    return answer["task"].get("metadata", {})


def test_a_batch_committed_between_the_reads_is_read_again_with_its_position(task, monkeypatch):
    writers = _batches_between_reads(monkeypatch, 1)

    seq, answer = selectors.send_answer_at(task.pk)

    # The first read saw the batch but not its position: read again, both agree.
    assert (seq, _metadata(answer)) == (1, {"batch": 1})
    assert not writers[0].is_alive()


def test_a_task_that_writes_faster_than_it_is_read_is_read_in_one_transaction(task, monkeypatch):
    writers = _batches_between_reads(monkeypatch, selectors.SNAPSHOT_TRIES + 1)

    seq, answer = selectors.send_answer_at(task.pk)

    for writer in writers:
        writer.join(10)
    assert Task.objects.get(pk=task.pk).event_seq == len(writers)  # every batch did commit
    # The answer is the state at its position: the last batch (in the transaction's read) is in
    # neither, on SQLite because it waited for the transaction, on PostgreSQL as REPEATABLE READ.
    assert seq == selectors.SNAPSHOT_TRIES
    assert _metadata(answer) == {"batch": selectors.SNAPSHOT_TRIES}
