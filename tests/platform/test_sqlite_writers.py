"""The embedded default's SQLite writers take turns on a lock of the process (a2a_platform/backends/sqlite3).

A writer waits for the lock, not in SQLite's sleeping busy handler; reads
never wait; the lock is given back however a transaction ends. On the
session's database in autocommit (`stored`), with tenants of the test's own,
removed at the end.
"""

import gc
import sqlite3
import threading
import uuid

import pytest
from django.db import OperationalError, connection, transaction

from a2a_platform.backends.sqlite3.base import DatabaseWrapper, _lock_for, _writes
from tenants.models import Tenant

pytestmark = pytest.mark.skipif(
    connection.vendor != "sqlite", reason="the writers' lock is the embedded default's (SQLite)"
)


@pytest.fixture
def slugs(stored):
    """A new slug prefix for the test's tenants, and the tenants deleted afterwards."""
    prefix = f"writers-{uuid.uuid4().hex[:8]}"
    yield lambda name: f"{prefix}-{name}"
    Tenant.objects.filter(slug__startswith=prefix).delete()


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
    thread.join(60)
    assert not thread.is_alive()
    return outcome


def test_a_writer_waits_on_the_lock_while_a_transaction_of_this_process_writes(slugs):
    Tenant.objects.create(slug=slugs("other"), name="Before")
    rename = "UPDATE tenants_tenant SET name = %s WHERE slug = %s"
    with transaction.atomic():
        Tenant.objects.create(slug=slugs("first"), name="First")
        assert _lock().locked()
        outcome = _in_another_thread(rename, ["During", slugs("other")], timeout=0.2)
    # The lock of the process timed out, not SQLite's busy handler: its own message.
    assert "waited for this process's other writers" in outcome.get("error", ""), outcome
    assert Tenant.objects.get(slug=slugs("other")).name == "Before"
    # Its turn comes once the transaction has ended (a longer wait: the server may be writing).
    assert _in_another_thread(rename, ["After", slugs("other")], timeout=10) == {"rows": []}
    assert Tenant.objects.get(slug=slugs("other")).name == "After"


def test_a_read_does_not_wait_for_a_writer(slugs):
    Tenant.objects.create(slug=slugs("before"), name="Before")
    with transaction.atomic():
        Tenant.objects.create(slug=slugs("during"), name="During")
        outcome = _in_another_thread(
            "SELECT slug FROM tenants_tenant WHERE slug = %s", [slugs("before")], timeout=0.2
        )
    assert outcome == {"rows": [(slugs("before"),)]}


def test_the_lock_is_given_back_however_a_transaction_ends(slugs):
    with transaction.atomic():
        Tenant.objects.create(slug=slugs("committed"), name="Committed")
        assert _lock().locked()
    assert not _lock().locked()

    with pytest.raises(ValueError), transaction.atomic():
        Tenant.objects.create(slug=slugs("rolled-back"), name="Rolled back")
        assert _lock().locked()
        raise ValueError("roll it back")
    assert not _lock().locked()

    with transaction.atomic():
        Tenant.objects.create(slug=slugs("closed"), name="Closed")
        assert _lock().locked()
        connection.close()
    assert not _lock().locked()

    Tenant.objects.create(slug=slugs("autocommit"), name="Autocommit")
    assert not _lock().locked()
    kept = Tenant.objects.filter(slug__startswith=slugs("")).values_list("slug", flat=True)
    assert sorted(kept) == [slugs("autocommit"), slugs("committed")]


def test_a_connection_that_holds_the_lock_does_not_wait_for_itself(slugs):
    # A transaction ended behind Django's back (a raw COMMIT) leaves the turn with the
    # connection; its next write goes on instead of waiting out the timeout on itself.
    with transaction.atomic():
        Tenant.objects.create(slug=slugs("raw"), name="Raw")
        with connection.cursor() as cursor:
            cursor.execute("COMMIT")
        Tenant.objects.create(slug=slugs("after"), name="After")
    assert not _lock().locked()
    assert Tenant.objects.filter(slug__startswith=slugs("")).count() == 2


def _other_connection(timeout: float) -> DatabaseWrapper:
    settings_dict = {
        **connection.settings_dict,
        "OPTIONS": {**connection.settings_dict["OPTIONS"], "timeout": timeout},
    }
    return DatabaseWrapper(settings_dict, "other")


def test_a_begin_that_fails_gives_the_turn_back(slugs):
    # Another process (here a plain sqlite3 connection, which knows no lock of this process)
    # holds the file's write lock: a BEGIN IMMEDIATE of ours fails once SQLite's busy timeout
    # is out, and must not keep the turn it took for that transaction.
    holder = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
    other = _other_connection(timeout=0.2)
    try:
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(OperationalError, match="database is locked"):
            # What transaction.atomic does to begin on a connection in autocommit.
            other.set_autocommit(False, force_begin_transaction_with_broken_autocommit=True)
        assert other.turns.held is None
        assert not _lock().locked()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        other.close()
    # This process's writers write again at once.
    Tenant.objects.create(slug=slugs("after"), name="After")
    assert Tenant.objects.filter(slug=slugs("after")).exists()


def test_a_connection_dropped_in_a_transaction_gives_the_turn_back(slugs):
    other = _other_connection(timeout=5)
    other.set_autocommit(False, force_begin_transaction_with_broken_autocommit=True)
    assert _lock().locked()
    del other
    gc.collect()
    assert not _lock().locked()
    Tenant.objects.create(slug=slugs("after"), name="After")
    assert Tenant.objects.filter(slug__startswith=slugs("")).count() == 1


@pytest.mark.parametrize(
    ("statement", "writes"),
    [
        ("SELECT 1", False),
        ("  select * from t", False),
        ("PRAGMA journal_mode", False),
        ("WITH x AS (SELECT 1) SELECT * FROM x", False),
        ("INSERT INTO t VALUES (1)", True),
        ("UPDATE t SET a = 1", True),
        ("DELETE FROM t", True),
        ("WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x", True),
        # A read that only mentions a writing word waits its turn too: the safe direction.
        ("WITH x AS (SELECT updated_at FROM t) SELECT * FROM x", True),
    ],
)
def test_which_statements_take_a_turn(statement, writes):
    assert _writes(statement) is writes
