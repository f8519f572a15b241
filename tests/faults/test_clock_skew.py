"""Workers whose clocks are off from the database's, and from beat's, neither lose nor repeat turns.

A lease is written and judged on the database's clock (tasks_app/turns/lease.py,
tasks_app/db.py database_now), and the sweeps beat sends do not expire (a
backlog of them runs one, by a slot on Redis' clock: tasks_app/sweeper.py
beat_sweep). Before that:
- a worker whose clock was behind wrote leases that had ended before they
  were written, as another worker's sweep saw them: its turn was taken away
  while it ran, again and again, and ended FAILED;
- a dead worker whose clock was ahead held its turn for as long again as its
  clock was ahead;
- a worker more than five sweep intervals (10 s by default, 2.5 s here)
  ahead of beat dropped every sweep as expired, so with only such workers
  left a lost turn never ran again; with an expiry of ten minutes, so did a
  worker an hour ahead.

The skewed workers are real Celery worker processes whose whole clock
(time.time, datetime.now, Celery's and Django's) is moved by Debian's
libfaketime (LD_PRELOAD, FAKETIME="+N s"); their monotonic clock is left
alone (DONT_FAKE_MONOTONIC), as a host's is when only its wall clock is
wrong. Lease 2 s, heartbeat 0.5 s, a sweep every 0.5 s.
"""

import glob
import os
import subprocess
import sys
import time
import uuid

import pytest

from tests.faults.harness import Stack, payload_text, record, rpc, send_params, wait_for

pytestmark = pytest.mark.skipif(
    not os.environ.get("REDIS_URL"), reason="fault tests run with the services-mode suite (REDIS_URL set)"
)

LEASE = 2.0
SLEEPER_SECONDS = 12.0  # the fault-sleeper agent's (conftest.py)
SETTINGS = {"A2A_TURN_LEASE": str(LEASE), "A2A_TURN_HEARTBEAT": "0.5", "A2A_SWEEP_INTERVAL": "0.5"}
# With DONT_FAKE_MONOTONIC, libfaketime makes time.sleep fail with EINVAL (its clock_nanosleep
# on the monotonic clock; wolfcw/libfaketime#426), which kombu calls on some paths. Every other
# timed wait (select, locks, events, asyncio) works: the skewed workers sleep through select.
SLEEP_THROUGH_SELECT = """\
import select
import time


def _sleep(seconds):
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    select.select([], [], [], seconds)


time.sleep = _sleep
"""


def libfaketime() -> str:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    assert found, "these tests need Debian's faketime package (libfaketime); .ci/run installs it"
    return found[0]


def start_skewed_worker(stack: Stack, name: str, seconds: int):
    """A Celery worker whose wall clock is `seconds` off; the stack's other processes keep theirs."""
    site = stack.log_dir / f"{name}-site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLEEP_THROUGH_SELECT)
    env = {
        "LD_PRELOAD": libfaketime(),
        "FAKETIME": f"{seconds:+d}s",
        "DONT_FAKE_MONOTONIC": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
    }
    # The same settings in a process of its own: they move the clock, and time.sleep still works.
    clock = [sys.executable, "-c", "import time; time.sleep(0.01); print(time.time())"]
    before = time.time()
    probe = subprocess.run(clock, env={**os.environ, **env}, capture_output=True, text=True, timeout=30)
    assert probe.returncode == 0, f"a process under libfaketime failed: {probe}"
    shown = float(probe.stdout)
    assert before + seconds - 1 <= shown <= time.time() + seconds + 1, f"the clock was not moved: {probe}"
    return stack.start_worker(name, env=env)


def start_turn(stack: Stack, web, label: str) -> str:
    """A fault-sleeper turn, answered at once; returns once a worker runs it (its first attempt)."""
    params = send_params("sleep", f"{label}-{uuid.uuid4()}", return_immediately=True)
    answer = rpc(web.agent_url("fault-sleeper"), "SendMessage", params)
    assert answer.task, f"SendMessage refused: {answer}"
    task_id = answer.task["id"]
    assert wait_for(lambda: turn_of(stack, task_id) == ("running", 1), 20), "no worker started the turn"
    return task_id


def turn_of(stack: Stack, task_id: str) -> tuple[str, int]:
    """(turn, turn_attempts) of the task's first user message."""
    rows = stack.store.rows(
        "SELECT turn, turn_attempts FROM tasks_app_message WHERE task_id = %s::uuid AND role = 'user'",
        (task_id,),
    )
    return rows[0]


def restarts_of(stack: Stack, task_id: str) -> list:
    log = stack.store.logs([task_id])[task_id]
    return [event for event in log if "restarted" in payload_text(event.payload)]


def outcome(stack: Stack, task_id: str, within: float) -> dict:
    """Whether the task completed within `within` seconds; then its turn's attempts and restarts."""
    completed = wait_for(
        lambda: stack.store.states([task_id]).get(task_id) == "completed", within, interval=0.3
    )
    _, attempts = turn_of(stack, task_id)
    return {"completed": completed, "attempts": attempts, "restarts": len(restarts_of(stack, task_id))}


def test_a_worker_whose_clock_is_behind_runs_its_turn_once_while_one_ahead_sweeps(stack):
    started = time.monotonic()
    stack.env.update(SETTINGS)
    web = stack.start_web()
    stack.start_beat()
    # Three leases behind: by the clocks of the others, each lease it wrote ended before it was written.
    start_skewed_worker(stack, "worker-behind", -6)
    task_id = start_turn(stack, web, "behind")
    # Three leases ahead: by its clock, every lease of the other has lapsed. Sweeps run on both.
    start_skewed_worker(stack, "worker-ahead", 6)
    ahead_ready_at = time.monotonic()
    assert turn_of(stack, task_id) == ("running", 1), "the turn ended before the worker ahead could sweep"
    figures = record(
        "clock_behind_and_ahead",
        started,
        **outcome(stack, task_id, SLEEPER_SECONDS + 20),
        # Sweeps the worker ahead could run while the turn was still running.
        ran_beside_the_sweeps_s=round(time.monotonic() - ahead_ready_at, 1),
        processes_exited=stack.exited(),
    )
    assert figures["completed"], f"the task did not complete: {figures}"
    assert figures["attempts"] == 1 and figures["restarts"] == 0, (
        f"the turn was given to another worker: {figures}"
    )
    # Some 8 sweeps at least, about half of them on the worker ahead.
    assert figures["ran_beside_the_sweeps_s"] >= 4, f"too short for the worker ahead to sweep: {figures}"
    assert figures["processes_exited"] == [], figures


def test_the_turn_of_a_dead_worker_ahead_runs_again_on_a_worker_far_ahead_of_beat(stack):
    started = time.monotonic()
    stack.env.update(SETTINGS)
    web = stack.start_web()
    stack.start_beat()
    dying = start_skewed_worker(stack, "worker-ahead", 30)
    task_id = start_turn(stack, web, "ahead")
    # The only worker left is an hour ahead of beat: past what sweeps used to live (2.5 s here,
    # then ten minutes).
    start_skewed_worker(stack, "worker-far-ahead", 3600)
    assert turn_of(stack, task_id) == ("running", 1), "the turn ended before its worker could be killed"
    killed_at = stack.kill(dying)
    rerun = wait_for(lambda: turn_of(stack, task_id)[1] == 2, LEASE + 15, interval=0.1)
    resumed_after_kill = time.time() - killed_at
    figures = record(
        "clock_ahead_killed",
        started,
        **outcome(stack, task_id, LEASE + SLEEPER_SECONDS + 15),
        resumed_after_kill_s=round(resumed_after_kill, 2) if rerun else None,
        processes_exited=stack.exited(),
    )
    assert figures["completed"], f"the turn of the dead worker was not run again in time: {figures}"
    assert figures["attempts"] == 2 and figures["restarts"] == 1, figures
    assert rerun and resumed_after_kill < LEASE + 3, f"the lost turn waited past its lease: {figures}"
    assert figures["processes_exited"] == [], figures
