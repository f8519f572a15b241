"""The control lane: webhook deliveries do not wait for a turn thread (embedded default).

Embedded, webhook deliveries and an agent's cancel() run on threads of their
own (tasks_app/dispatch.py), as they run on a queue and a worker of their own
in services mode (tests/platform/test_workserve.py). With its one turn thread
held by a slow turn, the server still sends the first event of a task queued
behind it: before that slow turn ends, while the queued task's turn has not
started. On one pool for both, the delivery waited for the slow turn.
"""

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from celery import current_app
from django.db.models import Min

from agents.models import Agent
from tasks_app.dispatch import CANCEL_AGENT, DELIVER_PUSH, RUN_TURN, lane_of
from tasks_app.models import PushDelivery, Task, TaskState
from tenants.models import Tenant
from tests.conftest import SERVICES_MODE, rpc_to, user_message
from tests.live import start_web, wait_for
from tests.tasks_app.webhooks import new_path

SLOW_TURN = 8.0
ROOT = Path(__file__).resolve().parents[2]


def test_webhooks_cancels_and_sweeps_go_to_the_control_queue_and_turns_do_not(settings):
    router = current_app.amqp.router
    control = ("deliver_push", "cancel_agent", "sweep_turns", "sweep_push", "sweep_retention")
    for job in control:
        name = f"tasks_app.tasks.{job}"
        assert router.route({}, name)["queue"].name == settings.A2A_CONTROL_QUEUE, name
        assert lane_of(name) == "control"
    assert router.route({}, RUN_TURN)["queue"].name == settings.CELERY_TASK_DEFAULT_QUEUE
    assert lane_of(RUN_TURN) == "turns"
    assert {DELIVER_PUSH, CANCEL_AGENT} <= {f"tasks_app.tasks.{job}" for job in control}


def test_each_lane_has_a_queue_and_an_embedded_pool_of_at_least_one_thread(tmp_path):
    read = (
        "import json, django; django.setup(); from django.conf import settings as s; print(json.dumps("
        "[s.A2A_LANE_QUEUES, [q.name for q in s.CELERY_TASK_QUEUES], s.EMBEDDED_WORKER_THREADS,"
        " s.EMBEDDED_CONTROL_THREADS]))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "a2a_platform.settings", "A2A_VAR_DIR": str(tmp_path)}
    env.update(CELERY_QUEUE="q7", EMBEDDED_WORKER_THREADS="0", EMBEDDED_CONTROL_THREADS="-3")
    done = subprocess.run(
        [sys.executable, "-c", read], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    lanes, queues, turn_threads, control_threads = json.loads(done.stdout.strip().splitlines()[-1])
    assert lanes == {"turns": "q7", "control": "q7-control"}
    assert queues == ["q7", "q7-control"]
    assert (turn_threads, control_threads) == (1, 1)


def send(web, text: str, **configuration) -> str:
    params = {**user_message(text, f"lane-{uuid.uuid4()}"), "configuration": {"returnImmediately": True}}
    params["configuration"].update(configuration)
    return rpc_to(web, "SendMessage", params, agent="lane-sleeper")["result"]["task"]["id"]


@pytest.mark.skipif(SERVICES_MODE, reason="the embedded default's pools (services: test_workserve.py)")
def test_a_webhook_goes_out_while_the_only_turn_thread_is_busy(stored, db_settings, log_dir, receiver):
    Agent.objects.update_or_create(
        tenant=Tenant.objects.get(slug="demo"),
        slug="lane-sleeper",
        defaults={"name": "lane sleeper", "handler": "sleeper", "config": {"seconds": SLOW_TURN}},
    )
    env = {"EMBEDDED_WORKER_THREADS": "1", "EMBEDDED_CONTROL_THREADS": "1"}
    web = start_web(db_settings, log_dir, name="web-control-lane", extra_env=env)
    try:
        busy = send(web, "busy")
        wait_for(lambda: Task.objects.get(id=busy).state == TaskState.WORKING, "the slow turn to run")
        path = new_path()
        queued = send(web, "queued", taskPushNotificationConfig={"url": receiver.url(path)})
        wait_for(lambda: receiver.received(path, succeeded_only=True), "the webhook", timeout=SLOW_TURN * 4)
        delivered = PushDelivery.objects.filter(
            config__task_id=queued, status=PushDelivery.Status.SUCCEEDED
        ).aggregate(first=Min("finished_at"))["first"]
        wait_for(lambda: Task.objects.get(id=busy).state == TaskState.COMPLETED, "the slow turn to end")
        busy_ended = Task.objects.get(id=busy).updated_at
    finally:
        web.stop()
    # Before the slow turn ended, so before the queued task's own turn could start on its thread.
    assert delivered is not None and delivered < busy_ended, (delivered, busy_ended)
