"""The embedded default's SQLite writers take turns on a lock of the process (a2a_platform/backends/sqlite3).

A writer waits for the lock, not in SQLite's sleeping busy handler; reads
never wait; the lock is given back however a transaction ends.
"""

import threading

import pytest
from django.db import OperationalError, connection, transaction

from a2a_platform.backends.sqlite3.base import DatabaseWrapper, _lock_for
from tenants.models import Tenant

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _sqlite_only():
    if connection.vendor != "sqlite":
        pytest.skip("the writers' lock is the embedded default's (SQLite)")


def _lock():
    return _lock_for(str(connection.settings_dict["NAME"]))


def _in_another_thread(statement: str, params: list, *, timeout: float):
    """Run one statement on a connection of another thread (with this lock timeout): its outcome."""
    outcome = {}

    def run():
        settings_dict = {
            **connection.settings_dict,
            "OPTIONS": {**connection.settings_dict["OPTIONS"], "timeout": timeout},
        }
        other = DatabaseWrapper(settings_dict, "other")
        try:
            with other.cursor() as cursor:
                cursor.execute(statement, params)
                outcome["rows"] = cursor.fetchall()
        except OperationalError as exc:
            outcome["error"] = str(exc)
        finally:
            other.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    assert not thread.is_alive()
    return outcome


def test_a_writer_waits_on_the_lock_while_a_transaction_of_this_process_writes():
    Tenant.objects.create(slug="other", name="Before")
    rename = "UPDATE tenants_tenant SET name = %s WHERE slug = %s"
    with transaction.atomic():
        Tenant.objects.create(slug="first", name="First")
        assert _lock().locked()
        outcome = _in_another_thread(rename, ["During", "other"], timeout=0.2)
    # The lock of the process timed out, not SQLite's busy handler: its own message.
    assert "waited for this process's other writers" in outcome.get("error", ""), outcome
    assert Tenant.objects.get(slug="other").name == "Before"
    # Its turn comes once the transaction has ended.
    assert _in_another_thread(rename, ["After", "other"], timeout=0.2) == {"rows": []}
    assert Tenant.objects.get(slug="other").name == "After"


def test_a_read_does_not_wait_for_a_writer():
    Tenant.objects.create(slug="before", name="Before")
    with transaction.atomic():
        Tenant.objects.create(slug="during", name="During")
        outcome = _in_another_thread(
            "SELECT slug FROM tenants_tenant WHERE slug = %s", ["before"], timeout=0.2
        )
    assert outcome == {"rows": [("before",)]}


def test_the_lock_is_given_back_however_a_transaction_ends():
    with transaction.atomic():
        Tenant.objects.create(slug="committed", name="Committed")
    assert not _lock().locked()

    with pytest.raises(ValueError), transaction.atomic():
        Tenant.objects.create(slug="rolled-back", name="Rolled back")
        raise ValueError("roll it back")
    assert not _lock().locked()

    with transaction.atomic():
        Tenant.objects.create(slug="closed", name="Closed")
        connection.close()
    assert not _lock().locked()

    Tenant.objects.create(slug="autocommit", name="Autocommit")
    assert not _lock().locked()
    assert sorted(
        Tenant.objects.filter(slug__in=["committed", "rolled-back", "closed", "autocommit"]).values_list(
            "slug", flat=True
        )
    ) == ["autocommit", "committed"]
