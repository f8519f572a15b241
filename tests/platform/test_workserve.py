"""`manage.py workserve`: services mode's workers as several supervised Celery worker processes.

The children take turns side by side (two turns run at once with one thread
in each child); the control lane's child takes no turn, and delivers a
webhook while both turn threads are busy; a child killed with SIGKILL is
replaced and turns keep completing; SIGTERM stops them all; a launcher killed
with SIGKILL takes its children down. The embedded default refuses the command.
"""

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest
from django.core.management import CommandError, call_command
from django.db.models import Min

from a2a_platform.management.commands.workserve import default_processes, threads_of
from agents.models import Agent
from tasks_app.models import PushDelivery, Task, TaskState
from tenants.models import Tenant
from tests.conftest import SERVICES_MODE, user_message
from tests.live import (
    ROOT,
    alive,
    child_env,
    children,
    spawn,
    start_web,
    stop_processes,
    wait_for,
    wait_started,
)
from tests.tasks_app.webhooks import Receiver, new_path

services_only = pytest.mark.skipif(not SERVICES_MODE, reason="workserve runs services mode's workers")
PROCESSES = 2
# And the control lane's process (--control-threads 1).
CHILDREN = PROCESSES + 1
# Seconds a turn of the slow agent takes: long enough for two to overlap on a busy machine.
SLOW_TURN = 5


@pytest.fixture
def workserve(db_settings, log_dir):
    """A workserve of PROCESSES one-thread children and a web, on a queue of their own."""
    env = {"CELERY_QUEUE": f"workserve-{uuid.uuid4().hex[:8]}"}
    args = [sys.executable, "manage.py", "workserve", "--processes", str(PROCESSES), "--concurrency", "1"]
    args += ["--control-threads", "1", "--", "--without-gossip", "--without-mingle"]
    launcher = spawn("workserve", args, child_env(db_settings, env), log_dir)
    wait_started(launcher, lambda: launcher.output().count("ready.") == CHILDREN, "every worker to be ready")
    try:
        web = start_web(db_settings, log_dir, name="workserve-web", extra_env=env)
    except BaseException:
        stop_processes([launcher])
        raise
    yield launcher, web
    stop_processes([*web.processes, launcher])


def turn_children(launcher) -> list[int]:
    """The launcher's children that take turns (not the control lane's: WORKER_LANE=control)."""
    return [pid for pid in children(launcher.popen.pid) if b"WORKER_LANE=control" not in environ(pid)]


def environ(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []


def send(web, agent: str, text: str, **configuration) -> dict:
    params = user_message(text, str(uuid.uuid4()))
    if configuration:
        params["configuration"] = configuration
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
    answer = httpx.post(web.agent_url(agent), json=body, headers={"A2A-Version": "1.0"}, timeout=30).json()
    return answer["result"]["task"]


def assert_echoes(web, count: int, label: str) -> None:
    for index in range(count):
        task = send(web, "echo", f"{label} {index}")
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
        assert f"({label} {index})" in task["artifacts"][0]["parts"][0]["text"]


@pytest.fixture
def slow_agent(stored) -> str:
    """A public agent whose turns take SLOW_TURN seconds (tests.handlers.SleeperExecutor)."""
    Agent.objects.update_or_create(
        tenant=Tenant.objects.get(slug="demo"),
        slug="workserve-slow",
        defaults={
            "name": "Slow",
            "handler": "sleeper",
            "config": {"seconds": SLOW_TURN},
            "visibility": "public",
        },
    )
    return "workserve-slow"


def assert_two_turns_at_once(web, agent: str) -> None:
    """Two slow turns run side by side: with one thread a child, on two worker processes."""
    ids = [send(web, agent, f"slow {n}", returnImmediately=True)["id"] for n in range(2)]

    def both_running() -> bool:
        states = set(Task.objects.filter(id__in=ids).values_list("state", flat=True))
        assert TaskState.COMPLETED not in states, "a turn ended before the other started"
        return states == {TaskState.WORKING}

    wait_for(both_running, "two turns running at once", timeout=SLOW_TURN * 3)
    wait_for(
        lambda: Task.objects.filter(id__in=ids, state=TaskState.COMPLETED).count() == 2,
        "both turns to complete",
    )


@services_only
def test_each_child_takes_turns(workserve, slow_agent):
    launcher, web = workserve
    assert_two_turns_at_once(web, slow_agent)
    assert len(children(launcher.popen.pid)) == CHILDREN
    assert len(turn_children(launcher)) == PROCESSES
    # Each child takes one lane: its Celery banner lists that one queue (WORKER_LANE).
    queues = [line.split()[1] for line in launcher.output().splitlines() if " exchange=" in line]
    assert sorted(queue.endswith("-control") for queue in queues) == [False] * PROCESSES + [True], queues


def test_a_worker_lane_that_is_neither_is_refused_at_start():
    env = {**os.environ, "WORKER_LANE": "both"}
    check = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert check.returncode != 0 and 'WORKER_LANE must be "turns", "control" or unset' in check.stderr


@services_only
def test_the_control_lane_pushes_while_every_turn_thread_is_busy(workserve, slow_agent):
    """Both turn threads run a slow turn; the second's webhook goes out before either has ended.

    Without the control lane's process the delivery waits for a turn thread: it
    goes out only once the first slow turn has completed.
    """
    _launcher, web = workserve
    receiver = Receiver()
    receiver.thread.start()
    try:
        first = send(web, slow_agent, "busy", returnImmediately=True)["id"]
        wait_for(lambda: Task.objects.get(id=first).state == TaskState.WORKING, "the first slow turn to run")
        path = new_path()
        push = {"url": receiver.url(path)}
        pushed = send(web, slow_agent, "pushed", returnImmediately=True, taskPushNotificationConfig=push)[
            "id"
        ]
        # Its first event (the task, stored with it) goes out before its turn takes the second
        # thread; the second (WORKING) is stored by the turn, once both threads are busy.
        webhook = lambda: len(receiver.received(path, succeeded_only=True)) >= 2  # noqa: E731
        wait_for(webhook, "the webhook of WORKING", timeout=SLOW_TURN * 4)
        # The receiver has it as soon as it answers; the worker records it just after.
        succeeded = PushDelivery.objects.filter(
            config__task_id=pushed, seq__gte=2, status=PushDelivery.Status.SUCCEEDED
        )
        wait_for(succeeded.exists, "the delivery of WORKING to be recorded", timeout=SLOW_TURN)
        delivered = succeeded.aggregate(first=Min("finished_at"))["first"]
        wait_for(lambda: Task.objects.get(id=first).state == TaskState.COMPLETED, "the first turn to end")
        first_ended = Task.objects.get(id=first).updated_at
        assert delivered is not None and delivered < first_ended, (delivered, first_ended)
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()


@services_only
def test_a_killed_child_is_replaced_and_turns_go_on(workserve, slow_agent):
    launcher, web = workserve
    before = turn_children(launcher)
    os.kill(before[0], signal.SIGKILL)
    wait_for(lambda: "Worker process" in launcher.output(), "the launcher to notice")
    assert f"Worker process {before[0]} exited (-9)" in launcher.output()
    wait_for(lambda: launcher.output().count("ready.") == CHILDREN + 1, "a new child to be ready")
    now = turn_children(launcher)
    assert before[1] in now and before[0] not in now and len(now) == PROCESSES
    # The new child takes turns too: the survivor alone could not run two at once.
    assert_two_turns_at_once(web, slow_agent)
    assert_echoes(web, 2, "after kill")


@services_only
def test_sigterm_stops_every_child(workserve):
    launcher, web = workserve
    assert_echoes(web, 2, "before stop")
    kids = children(launcher.popen.pid)
    launcher.popen.send_signal(signal.SIGTERM)
    assert launcher.popen.wait(timeout=40) == 0
    assert [pid for pid in kids if alive(pid)] == []
    assert "exited" not in launcher.output()  # stopped, not lost and started again
    assert launcher.output().count("Warm shutdown") == CHILDREN


@services_only
def test_a_launcher_killed_hard_takes_its_children_down(workserve):
    launcher, _web = workserve
    kids = children(launcher.popen.pid)
    assert len(kids) == CHILDREN
    launcher.popen.kill()
    launcher.popen.wait(timeout=10)
    wait_for(lambda: not any(alive(pid) for pid in kids), "the children to exit")


def test_the_embedded_default_refuses(settings):
    settings.EMBEDDED_WORKER = True
    with pytest.raises(CommandError, match="set REDIS_URL"):
        call_command("workserve")


@pytest.mark.parametrize("option", ["--processes", "--concurrency"])
def test_zero_processes_or_threads_is_an_error(settings, option):
    settings.EMBEDDED_WORKER = False
    with pytest.raises(CommandError, match="at least 1"):
        call_command("workserve", option, "0")


def test_negative_control_threads_is_an_error(settings):
    settings.EMBEDDED_WORKER = False
    with pytest.raises(CommandError, match="--control-threads must be at least 0"):
        call_command("workserve", "--control-threads", "-1")


def test_the_threads_are_shared_out_and_add_up(settings):
    settings.WORKER_THREADS = 8
    assert [threads_of(slot, 3) for slot in range(3)] == [3, 3, 2]
    assert [threads_of(slot, 2) for slot in range(2)] == [4, 4]
    settings.WORKER_PROCESSES = 0
    # Never more processes than threads, whatever the CPUs.
    assert 1 <= default_processes() <= 8
    settings.WORKER_THREADS = 1
    assert default_processes() == 1
