"""Django's SQLite backend, with this process's writers taking turns on a lock instead of sleeping.

SQLite lets one connection write at a time. A writer that finds the file
locked is left to SQLite's busy handler, which sleeps and looks again, after
1, 2, 5, 10, 15, 20, 25 ms and on up to 100 ms a try: it goes on sleeping
when the lock was freed just after it looked. In the embedded default the
web's accept threads and the worker threads all write to one file, and under
load those sleeps made the slow tail (p99 690 ms at c=8 against a p50 of
39 ms in bench/run.py, blocking SendMessage).

So the connections of one process to one file take a lock of the process
first: for a whole transaction from its BEGIN IMMEDIATE to its COMMIT or
ROLLBACK, and for a single writing statement outside one. The next writer
wakes when the lock is let go. Another process (a management command, the
test suite beside a server) still meets SQLite's own lock and busy handler.

A lock that does not come within the connection's timeout raises what
SQLite raises then ("database is locked"). The wait is bounded, by twice the
timeout at worst: the lock's, then SQLite's busy handler's if another process
holds the file.

A write with RETURNING outside a transaction gives the lock back once it has
run; SQLite ends its implicit transaction when the cursor is read to the end,
which Django does at once (a writer coming in between meets the busy handler).
A read taken for a write (a WITH that only names a writing word) only waits
its turn: the safe direction.
"""

import threading

from django.db import OperationalError
from django.db.backends.sqlite3 import base

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()

# Statements that take no turn of their own outside a transaction: reads, and transaction
# control (a transaction takes its turn as it begins: _start_transaction_under_autocommit).
_READS = ("SELECT", "PRAGMA", "EXPLAIN", "BEGIN", "SAVEPOINT", "RELEASE", "ROLLBACK", "COMMIT")


def _lock_for(name: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(name, threading.Lock())


class WriterTurns:
    """One connection's place in its file's queue of writers."""

    def __init__(self, settings_dict: dict):
        # Read when a turn is taken: the test runner renames the database after connecting.
        self.settings_dict = settings_dict
        self.held: threading.Lock | None = None

    def take(self) -> None:
        if self.held is not None:
            return  # this connection's turn already (a transaction ended behind Django's back)
        lock = _lock_for(str(self.settings_dict["NAME"]))
        if not lock.acquire(timeout=float(self.settings_dict["OPTIONS"].get("timeout", 5))):
            raise OperationalError("database is locked (waited for this process's other writers)")
        self.held = lock

    def give_back(self) -> None:
        held, self.held = self.held, None
        if held is not None:
            held.release()

    def __del__(self):
        # A connection dropped in a transaction without being closed: SQLite rolls its
        # transaction back as the connection goes, and the other writers get their turn.
        self.give_back()


def _writes(query: str) -> bool:
    head = query.lstrip()[:9].upper()
    return not head.startswith(_READS) and not (head.startswith("WITH") and _reads_only(query))


def _reads_only(query: str) -> bool:
    upper = query.upper()
    return not any(word in upper for word in ("INSERT", "UPDATE", "DELETE", "REPLACE"))


class CursorWrapper(base.SQLiteCursorWrapper):
    turns: WriterTurns

    def execute(self, query, params=None):
        return self._in_turn(query, super().execute, query, params)

    def executemany(self, query, param_list):
        return self._in_turn(query, super().executemany, query, param_list)

    def _in_turn(self, query: str, run, *args):
        """run(*args); a write outside a transaction waits for its turn at the lock first."""
        if self.connection.in_transaction or self.turns.held is not None or not _writes(query):
            return run(*args)
        self.turns.take()
        try:
            return run(*args)
        finally:
            self.turns.give_back()


class DatabaseWrapper(base.DatabaseWrapper):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.turns = WriterTurns(self.settings_dict)

    def create_cursor(self, name=None):
        cursor = self.connection.cursor(factory=CursorWrapper)
        cursor.turns = self.turns
        return cursor

    def _start_transaction_under_autocommit(self):
        self.turns.take()
        try:
            super()._start_transaction_under_autocommit()
        except BaseException:
            self.turns.give_back()
            raise

    def _commit(self):
        try:
            return super()._commit()
        finally:
            self._give_back_unless_in_transaction()

    def _rollback(self):
        try:
            return super()._rollback()
        finally:
            self._give_back_unless_in_transaction()

    def _close(self):
        try:
            return super()._close()
        finally:
            self.turns.give_back()

    def _give_back_unless_in_transaction(self):
        if self.connection is None or not self.connection.in_transaction:
            self.turns.give_back()
