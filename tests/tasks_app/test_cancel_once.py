"""An agent that asked for input and runs on is given cancel() once when its task is canceled.

Its own last batch closed the turn (INPUT_REQUIRED), so the cancel finds no
turn running and sends the agent cancel() itself; the turn's watcher, still
listening while execute() runs on, got the cancel too and gave it a second.
"""

import time
import uuid

import pytest
from django.conf import settings

from agents.models import Agent
from tasks_app.dispatch import redis_client
from tasks_app.events import cancel_group_name
from tasks_app.models import Task
from tenants.models import Tenant
from tests.conftest import SERVICES_MODE, user_message
from tests.handlers import cancels_file

pytestmark = pytest.mark.skipif(not SERVICES_MODE, reason="waits for the watcher's Redis subscription")


def test_an_agent_that_asked_and_runs_on_gets_one_cancel(rpc, stored, tmp_path):
    Agent.objects.update_or_create(
        tenant=Tenant.objects.get(slug="demo"),
        slug="ask-then-linger",
        defaults={
            "name": "ask-then-linger",
            "handler": "ask-then-linger",
            "visibility": Agent.Visibility.PUBLIC,
        },
    )
    gate = tmp_path / "gate"
    params = user_message(str(gate), f"m-{uuid.uuid4()}")
    params["configuration"] = {"returnImmediately": True}
    task_id = rpc("SendMessage", params, agent="ask-then-linger")["result"]["task"]["id"]
    noted = cancels_file(task_id)
    try:
        deadline = time.monotonic() + 20
        redis = redis_client(settings.REDIS_URL)
        # The watcher listens for a cancel; then the agent asks, its execute() running on.
        while not redis.pubsub_channels(f"*{cancel_group_name(task_id)}*"):
            assert time.monotonic() < deadline, "the turn's watcher never listened for a cancel"
            time.sleep(0.02)
        while Task.objects.get(pk=task_id).state != "input-required":
            assert time.monotonic() < deadline, "the agent never asked"
            time.sleep(0.02)

        canceled = rpc("CancelTask", {"id": task_id}, agent="ask-then-linger")
        assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED", canceled
        deadline = time.monotonic() + 20
        while not noted.exists():
            assert time.monotonic() < deadline, "the agent never got cancel()"
            time.sleep(0.05)
        time.sleep(1.0)  # a second cancel(), from the watcher, comes within moments of the first
        gate.touch()
        time.sleep(0.5)  # the execution ends on its next look at the gate

        assert noted.read_text().splitlines() == ["cancel()"]
    finally:
        gate.touch()
        noted.unlink(missing_ok=True)
