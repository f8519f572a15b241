"""How a write whose COMMIT got no answer is looked for (tasks_app/commits.stored_after_all).

The cutter tests (test_accept_commit_lost.py) need PostgreSQL; these ask the
look-up itself, on either store.
"""

from django.db import transaction

from tasks_app.commits import stored_after_all
from tasks_app.models import TaskEvent
from tasks_app.services import CANCEL_ENTRY
from tests.conftest import SERVICES_MODE
from tests.tasks_app.turn_rows import running_turn


class RolledBack(Exception):
    pass


def _entry(task, seq: int, state: str) -> TaskEvent:
    payload = {"statusUpdate": {"taskId": str(task.pk), "status": {"state": state}}}
    return TaskEvent.objects.create(task=task, seq=seq, kind=TaskEvent.Kind.STATUS, payload=payload)


def _same(entry: TaskEvent) -> dict:
    return {name: getattr(entry, name) for name in CANCEL_ENTRY}


def test_a_rolled_back_cancel_entry_is_not_taken_for_the_entry_stored_after_it_in_its_place(stored):
    # SQLite gives a rolled-back row's id to the next row, and the running turn's next entry takes
    # the cancel's position in the log: only its time tells the cancel's entry from it. Found,
    # the cancel would be answered as done, and its agent's cancel() and webhooks run.
    task, _ = running_turn(attempts=1, lease_seconds=600)
    try:
        # One transaction around both, so that no other writer's row comes in between (on SQLite
        # the embedded server's threads write too): the cancel's entry is rolled back to a savepoint.
        with transaction.atomic():
            canceled = None
            try:
                with transaction.atomic():
                    canceled = _entry(task, 2, "TASK_STATE_CANCELED")
                    raise RolledBack
            except RolledBack:
                pass
            working = _entry(task, 2, "TASK_STATE_WORKING")
        if not SERVICES_MODE:
            assert working.pk == canceled.pk  # what makes the id alone no proof (PostgreSQL never reuses one)

        assert stored_after_all(canceled, [], **_same(canceled)) is False
        assert stored_after_all(working, [], **_same(working)) is True
    finally:
        task.context.delete()  # and the task with it
