"""The leases of this process's running turns, kept from a thread of their own while an agent holds its loop.

A turn's watcher renews its lease on the turn's loop. An agent that blocks
that loop (a synchronous call to a model's API from its async execute(), say)
holds the watcher up with it: on a healthy database its lease would lapse, the
fence would stop the agent as it comes back, and the sweeper would give the
turn to another worker while it still ran. The keeper renews, in one
statement, the lease of each turn of the process whose watcher is late; while
the watchers keep up it writes nothing.

A kept lease still says that this process is alive and reaches the database,
no more: a turn past its time limit (and the time its stop is given) is no
longer kept, so an agent that blocks its loop for good ends as one on a dead
worker does, and when the database is out of reach the keeper renews nothing
and the fence works as before.
"""

import logging
import threading
import time
from dataclasses import dataclass

from django.conf import settings

from tasks_app.db import UNAVAILABLE_ERRORS, on_this_thread
from tasks_app.turns.lease import Turn, leases_renew

logger = logging.getLogger("tasks_app.turns")

# The keeper renews a lease once its last renewal is this many heartbeats old
# (the watcher renews after one), and ahead of the fence by this share of the
# lease (the watcher: run.RENEW_AHEAD, 0.1): it steps in only for a late watcher.
LATE_AFTER = 1.5
AHEAD = 0.05


@dataclass
class _Held:
    turn: Turn
    until: float  # time.monotonic() after which the turn's lease is no longer kept
    kept: bool = False  # its lease was kept once (logged then)


class LeaseKeeper:
    """The keeper of a process (`keeper`): its thread starts with the first turn it holds.

    `thread=False`: none starts; due() and renew() are called by hand (tests).
    """

    def __init__(self, thread: bool = True):
        self.lock = threading.Lock()
        self.held: dict[int, _Held] = {}
        self.thread: threading.Thread | None = None
        self.threaded = thread

    def hold(self, turn: Turn, until: float) -> None:
        """Keep the turn's lease while its watcher is late, up to time.monotonic() `until`."""
        with self.lock:
            self.held[turn.message_pk] = _Held(turn, until)
            if self.threaded and self.thread is None:
                self.thread = threading.Thread(target=self._keep, name="lease-keeper", daemon=True)
                self.thread.start()

    def drop(self, turn: Turn) -> None:
        with self.lock:
            held = self.held.get(turn.message_pk)
            if held is not None and held.turn is turn:
                del self.held[turn.message_pk]

    def due(self, now: float) -> list[Turn]:
        """The turns whose watcher is late now; those past their time are let go."""
        lease, heartbeat = settings.A2A_TURN_LEASE, settings.A2A_TURN_HEARTBEAT
        with self.lock:
            held = list(self.held.values())
        late = []
        for entry in held:
            if now >= entry.until:
                logger.warning(
                    "Turn %s of task %s holds its thread past its time limit; its lease is left to lapse",
                    entry.turn.message_pk,
                    entry.turn.task_pk,
                )
                self.drop(entry.turn)
            elif now >= entry.turn.lease.renewal_due(LATE_AFTER * heartbeat, AHEAD * lease):
                late.append(entry.turn)
        return late

    def renew(self, turns: list[Turn]) -> None:
        """Renew the turns' leases; a turn whose lease another attempt holds now is let go."""
        kept = {turn.message_pk for turn in on_this_thread(leases_renew, turns)}
        for turn in turns:
            if turn.message_pk not in kept:
                self.drop(turn)
                continue
            with self.lock:
                held = self.held.get(turn.message_pk)
                first = held is not None and not held.kept
                if first:
                    held.kept = True
            if first:
                logger.info(
                    "Turn %s of task %s: its agent holds the turn's thread; its lease is kept meanwhile",
                    turn.message_pk,
                    turn.task_pk,
                )

    def _keep(self) -> None:
        while True:
            time.sleep(min(settings.A2A_TURN_HEARTBEAT, AHEAD * settings.A2A_TURN_LEASE))
            late = []
            try:
                late = self.due(time.monotonic())
                if late:
                    self.renew(late)
            except UNAVAILABLE_ERRORS as exc:
                # The fence stops those agents it can before their leases lapse.
                logger.warning("Could not keep the leases of %d turn(s): %r", len(late), exc)
            except Exception:
                logger.exception("The lease keeper failed; it goes on")


keeper = LeaseKeeper()
