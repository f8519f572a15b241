"""A transaction whose COMMIT got no answer: stored after all is stored, never answered as an error.

The database can go away between committing a transaction and telling the
process so (a restart, a dropped connection), and the error cannot tell
whether the COMMIT went through. Answered "nothing was stored" when it had
been, a caller sent it again: a second task, a second webhook config, or a
cancel told the task is no longer cancelable. `atomic_checked` asks the store
instead.
"""

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import OperationalError, connections, transaction
from django.db.models import Model

from tasks_app.db import UNAVAILABLE_ERRORS

logger = logging.getLogger(__name__)

R = TypeVar("R")

# How long a write whose COMMIT got no answer goes on looking for its row (a restart's time), and the
# pause between two looks. Each look may wait DB_POOL_TIMEOUT for a connection besides.
COMMIT_CHECK_FOR = 5.0
COMMIT_CHECK_PAUSE = 0.25


class CommitUnknown(OperationalError):
    """A COMMIT got no answer, and the store could not be asked since: it may have gone through.

    An OperationalError, so whatever handles an unreachable database handles
    it; the bindings say that what was sent may have been stored.
    """


def rechecked(hook: Callable[[], object]) -> Callable[[], object]:
    """Mark an after-COMMIT hook as one that reads the store before it acts (a job's dispatch).

    Such a hook finds nothing to do if nothing was stored, so it runs even when
    a COMMIT's outcome could not be learned (stored_after_all); the others (a
    publish) run only once the store says the transaction is there.
    """
    hook.rechecks_store = True
    return hook


def atomic_checked(write: Callable[[], tuple[R, Model | None]], *, same: tuple[str, ...] = ()) -> R:
    """Run write() in a transaction of its own; answer its result once the transaction is stored.

    write() answers (result, row): a row the transaction inserted, with the id
    the database gave it (None: nothing to look for, such as a repeat); `same`
    names fields that tell that row from any other (a message's task and
    messageId). If the COMMIT gets no answer, the store is asked whether that
    row is there (stored_after_all): stored after all, the result is answered
    and what was to run after the COMMIT runs; not stored, the error is raised;
    not known, CommitUnknown.
    """
    written: tuple[Model, list, int | None] | None = None
    try:
        with transaction.atomic():
            result, row = write()
            if row is not None:
                connection = transaction.get_connection()
                written = row, list(connection.run_on_commit), _session_of(connection)
    except UNAVAILABLE_ERRORS:
        # Inside a caller's transaction, that one's COMMIT decides; else only ours was left.
        if written is None or transaction.get_connection().in_atomic_block:
            raise
        row, after_commit, session = written
        same_fields = {name: getattr(row, name) for name in same}
        if not stored_after_all(row, after_commit, session=session, **same_fields):
            raise
        logger.warning("%s %s: its COMMIT got no answer; it was stored", type(row).__name__, row.pk)
    return result


def _session_of(connection) -> int | None:
    """The PostgreSQL server process of a connection (libpq knows it: no statement); None on SQLite."""
    if connection.vendor != "postgresql":
        return None
    return connection.connection.info.backend_pid


# What the server process that was committing is doing now (no row: it is gone). Asked before the
# row is looked for: once it is gone or idle, the row's presence is final. Not this connection's
# own process, which may have been given the same id after a restart.
_SESSION_STATE = "SELECT state FROM pg_stat_activity WHERE pid = %s AND pid <> pg_backend_pid()"
# Still in its transaction, or running the COMMIT. Any other state says the transaction is over,
# or cannot be read (NULL: hidden from this role; 'disabled': track_activities off): then the row
# is looked for at once, as where there is no process to ask.
_BUSY_STATES = ("active", "idle in transaction", "idle in transaction (aborted)", "fastpath function call")


def _stored(row: Model, session: int | None, same: dict) -> bool | None:
    """Whether `row` is stored; None while the session that was committing it may still commit."""
    if session is not None:
        with connections["default"].cursor() as cursor:
            cursor.execute(_SESSION_STATE, [session])
            found = cursor.fetchone()
        if found is not None and found[0] in _BUSY_STATES:
            return None
    return type(row).objects.filter(pk=row.pk, **same).exists()


def stored_after_all(row: Model, after_commit: list, *, session: int | None = None, **same) -> bool:
    """Whether the transaction that inserted `row` committed, its COMMIT having got no answer.

    The store is asked on a new connection, again for COMMIT_CHECK_FOR
    seconds (a restart). On PostgreSQL it is asked first whether the server
    process that ran the transaction (`session`) is done with it: a COMMIT
    still on its way, or still running, when the client saw its connection
    fail would otherwise be looked for too soon, and a send it stored
    answered "nothing was stored". The row's id was the database's, and PostgreSQL
    never gives a rolled-back transaction's ids again: a row of that id is
    this one. (SQLite may give a rolled-back id to the next row: the fields
    in `same` tell this row from that one.) Stored, what was to run after the
    COMMIT (Django's on_commit hooks: a turn's dispatch, a log entry's
    publish, a webhook's job, an agent's cancel()) runs now. The store out of
    reach throughout: only the hooks marked `rechecked` run (each finds
    nothing to do if nothing was stored; nothing that may not be stored is
    published, readers find what was in the log), and CommitUnknown is raised.
    So too while that server process stays in its transaction throughout (a
    COMMIT lost on its way; the server ends such a session, rolling it back,
    after DB_IDLE_IN_TRANSACTION_TIMEOUT, or when its TCP keepalives find the
    client gone). Behind a connection pooler the process
    id the client is told is not the server process's (PgBouncer, in every
    mode): the row is looked for at once, or, where that id is a busy
    process's by chance, its outcome stays unknown.
    """
    deadline = time.monotonic() + COMMIT_CHECK_FOR
    while True:
        try:
            connections["default"].close()
            found = _stored(row, session, same)
        except UNAVAILABLE_ERRORS:
            found = None
        if found is not None or time.monotonic() + COMMIT_CHECK_PAUSE > deadline:
            break
        time.sleep(COMMIT_CHECK_PAUSE)
    if found is False:
        return False
    for _, hook, _ in after_commit:
        if found is None and not getattr(hook, "rechecks_store", False):
            continue
        try:
            hook()
        except Exception:
            logger.exception("%s %s: %s failed after its COMMIT", type(row).__name__, row.pk, hook)
    if found is None:
        raise CommitUnknown("the database did not answer the COMMIT, nor since")
    return True
