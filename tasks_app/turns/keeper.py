"""The leases of this process's running turns, kept from a thread of their own while an agent holds its loop.

A turn's watcher renews its lease on the turn's loop. An agent that blocks
that loop (a synchronous call to a model's API from its async execute(), say)
holds the watcher up with it: on a healthy database its lease would lapse, the
fence would stop the agent as it comes back, and the sweeper would give the
turn to another worker while it still ran. The keeper renews, in one
statement, the lease of each turn of the process whose watcher is late: a
renewal LATE_AFTER heartbeats old, or close to its fence. While the watchers
keep up it writes nothing.

A kept lease still says that this process is alive and reaches the database,
no more: a turn past its time limit (and the time its stop is given) is no
longer kept, so an agent that blocks its loop for good ends as one on a dead
worker does, and when the database is out of reach the keeper renews nothing
and the fence works as before.
"""

import logging
import math
import threading
import time
from dataclasses import dataclass

from django.conf import settings

from tasks_app.db import UNAVAILABLE_ERRORS, on_this_thread
from tasks_app.turns.lease import RENEW_AHEAD, Turn, leases_renew

logger = logging.getLogger("tasks_app.turns")

# The keeper renews a lease once its last renewal is this many heartbeats old
# (the watcher renews after one), or this share of the lease before its fence
# (the watcher: RENEW_AHEAD, a little earlier): it steps in for a late watcher only.
LATE_AFTER = 1.5
AHEAD = 0.75 * RENEW_AHEAD


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
        # Set by hold() for a turn whose lease falls due before the thread's next wake-up.
        self.wake = threading.Event()
        self.next_wake = math.inf  # time.monotonic(); inf while the thread works out when
        self.failing = False  # the last renewal could not reach the database

    def hold(self, turn: Turn, until: float) -> None:
        """Keep the turn's lease while its watcher is late, up to time.monotonic() `until`."""
        with self.lock:
            self.held[turn.message_pk] = _Held(turn, until)
            if self.threaded and self.thread is None:
                self.thread = threading.Thread(target=self._keep, name="lease-keeper", daemon=True)
                self.thread.start()
        if self._due_at(turn) < self.next_wake:  # only with a heartbeat near the lease: rarely
            self.wake.set()

    def drop(self, turn: Turn) -> None:
        with self.lock:
            held = self.held.get(turn.message_pk)
            if held is not None and held.turn is turn:
                del self.held[turn.message_pk]

    @staticmethod
    def _due_at(turn: Turn) -> float:
        return turn.lease.renewal_due(
            LATE_AFTER * settings.A2A_TURN_HEARTBEAT, AHEAD * settings.A2A_TURN_LEASE
        )

    def due(self, now: float) -> list[Turn]:
        """The turns whose watcher is late now; a late one past its time is let go instead."""
        with self.lock:
            held = list(self.held.values())
        late = []
        for entry in held:
            if now < self._due_at(entry.turn):
                continue
            if now < entry.until:
                late.append(entry.turn)
                continue
            self.drop(entry.turn)
            logger.warning(
                "Turn %s of task %s holds its thread past its time limit; its lease is left to lapse",
                entry.turn.message_pk,
                entry.turn.task_pk,
                extra={"task_id": str(entry.turn.task_pk)},
            )
        return late

    def renew(self, turns: list[Turn]) -> None:
        """Renew the turns' leases; a turn no longer theirs (closed, or another attempt's) is let go."""
        kept = {turn.message_pk for turn in on_this_thread(leases_renew, turns)}
        for turn in turns:
            if turn.message_pk not in kept:
                self.drop(turn)
                continue
            with self.lock:
                held = self.held.get(turn.message_pk)
                first = held is not None and held.turn is turn and not held.kept
                if first:
                    held.kept = True
            if first:
                logger.info(
                    "Turn %s of task %s: its watcher is late (its agent may block the turn's loop); "
                    "its lease is kept meanwhile",
                    turn.message_pk,
                    turn.task_pk,
                    extra={"task_id": str(turn.task_pk)},
                )

    def pause(self, now: float) -> float:
        """Seconds until the next lease held falls due (a heartbeat at most)."""
        with self.lock:
            turns = [entry.turn for entry in self.held.values()]
        heartbeat = settings.A2A_TURN_HEARTBEAT
        due = min((self._due_at(turn) for turn in turns), default=now + heartbeat)
        return min(max(due - now, 0.01), heartbeat)

    def _keep(self) -> None:
        while True:
            self.next_wake = math.inf
            self.wake.clear()
            now = time.monotonic()
            pause = self.pause(now)
            self.next_wake = now + pause
            self.wake.wait(pause)
            late = []
            try:
                late = self.due(time.monotonic())
                if late:
                    self.renew(late)
                    if self.failing:
                        self.failing = False
                        logger.info("The lease keeper reaches the database again")
            except UNAVAILABLE_ERRORS as exc:
                # The fence stops those agents it can before their leases lapse. Said once an outage.
                if not self.failing:
                    self.failing = True
                    logger.warning("Could not keep the leases of %d turn(s): %r", len(late), exc)
            except Exception:
                logger.exception("The lease keeper failed; it goes on")


keeper = LeaseKeeper()
