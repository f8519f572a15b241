"""Hand work to the workers: Celery over Redis in services mode, threads of this process embedded.

Jobs are named, not imported (tasks_app.tasks imports the engine, which
dispatches), and each job is the same Celery task body in both modes. A
failure to hand a job over is logged and never raised: what is stored is
found again by the sweeper.

Embedded, a job runs on a thread of this process at once, with no broker to
poll: that is what makes the default as fast as the services mode.

Two lanes, in both modes: the turns, and the control jobs that keep the
platform going (webhook deliveries, an agent's cancel(), and in services mode
beat's sweeps). Control jobs have threads of their own (a queue of their own
and workserve's control worker in services mode, a pool of their own
embedded), so that when every turn thread runs a long turn a webhook still
goes out and a dead worker's turn is still found.
"""

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import cache

from celery import current_app
from django.conf import settings

logger = logging.getLogger(__name__)

RUN_TURN = "tasks_app.tasks.run_turn"
CANCEL_AGENT = "tasks_app.tasks.cancel_agent"
DELIVER_PUSH = "tasks_app.tasks.deliver_push"

# Embedded: lane ("turns" or "control") -> its pool, made on first use.
_embedded_pools: dict[str, ThreadPoolExecutor] = {}
_embedded_lock = threading.Lock()
# Jobs handed to an embedded pool that no thread has started yet, by lane (the queue depth metric).
_embedded_waiting = {"turns": 0, "control": 0}


def lane_of(name: str) -> str:
    """The lane a job runs in: "control" for those routed to the control queue, else "turns".

    Embedded, the control lane's jobs have threads of their own, so that a
    webhook delivery or a cancel never waits behind the turns.
    """
    route = settings.CELERY_TASK_ROUTES.get(name, {})
    return "control" if route.get("queue") == settings.A2A_CONTROL_QUEUE else "turns"


def _embedded(lane: str) -> ThreadPoolExecutor:
    with _embedded_lock:
        pool = _embedded_pools.get(lane)
        if pool is None:
            threads = (
                settings.EMBEDDED_CONTROL_THREADS if lane == "control" else settings.EMBEDDED_WORKER_THREADS
            )
            pool = _embedded_pools[lane] = ThreadPoolExecutor(
                max_workers=threads, thread_name_prefix=f"embedded-{lane}"
            )
        return pool


def embedded_queue_depth(lane: str = "turns") -> int:
    """Jobs of a lane waiting for a thread of this process (embedded default)."""
    return _embedded_waiting[lane]


def _submit_embedded(name: str, args: tuple) -> None:
    lane = lane_of(name)
    with _embedded_lock:
        _embedded_waiting[lane] += 1
    _embedded(lane).submit(_run_embedded, name, args)


def _run_embedded(name: str, args: tuple) -> None:
    from django.db import close_old_connections

    with _embedded_lock:
        _embedded_waiting[lane_of(name)] -= 1
    close_old_connections()
    try:
        current_app.tasks[name].run(*args)
    except Exception:
        logger.exception("Job %s%r failed", name, args)
    finally:
        close_old_connections()


# Services mode: which of a queue's jobs a free worker thread takes first. On Redis (kombu's
# priority steps 0, 3, 6, 9: one list each, read lowest first) a job sent without a priority is
# in step 0: beat's sweeps, so that when every thread runs a turn the first to come free sweeps
# instead of running the whole backlog first. A turn run again after its worker was lost comes
# next, ahead of the turns queued since; every other job (new turns, webhook deliveries, an
# agent's cancel()) takes its turn in the order it came, as all jobs did before. Embedded, jobs
# start in the order they come (its sweeper is a thread of its own).
PRIORITY_AGAIN = 3
PRIORITY_JOBS = 6


def job_send(name: str, *args, countdown: float | None = None, priority: int = PRIORITY_JOBS) -> bool:
    """Queue one job; False (logged) if it could not be handed over."""
    try:
        if settings.EMBEDDED_WORKER:
            if countdown:
                timer = threading.Timer(countdown, lambda: _submit_embedded(name, args))
                timer.daemon = True
                timer.start()
            else:
                _submit_embedded(name, args)
        else:
            # argsrepr: Celery's own (a size-capped repr) costs more than the plain one of a job's ids.
            current_app.send_task(
                name, args=args, countdown=countdown, priority=priority, argsrepr=repr(args)
            )
    except Exception:
        logger.exception("Could not queue %s%r; the sweeper will retry", name, args)
        return False
    return True


def turn_dispatch(task_pk, message_pk: int, *, again: bool = False) -> bool:
    """Hand a stored turn to the workers. A broker failure only delays it: the sweeper retries.

    `again`: a turn attempted before, whose worker was lost: ahead of the turns queued since.
    """
    return job_send(RUN_TURN, str(task_pk), message_pk, priority=PRIORITY_AGAIN if again else PRIORITY_JOBS)


def agent_cancel_dispatch(task_pk) -> bool:
    """Have a worker give a task canceled while no turn ran its agent's cancel().

    A broker failure is only logged: the task is CANCELED already, the agent
    misses its chance to let go of what it holds elsewhere.
    """
    return job_send(CANCEL_AGENT, str(task_pk))


@cache
def redis_client(url: str):
    """One redis-py client per URL for the process, with short timeouts (quotas, beat's sweep slots)."""
    import redis

    return redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0)
