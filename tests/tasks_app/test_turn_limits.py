"""Runaway turns: a time limit per agent, and a cancel that stops even an agent that will not stop."""

import time
import uuid

import httpx

from agents.models import Agent
from tenants.models import Tenant
from tests.conftest import user_message

# Turns a worker (or the embedded default) runs at once.
WORKER_THREADS = 8


def _agent(slug: str, handler: str, **fields) -> None:
    Agent.objects.update_or_create(
        tenant=Tenant.objects.get(slug="demo"),
        slug=slug,
        defaults={"name": slug, "handler": handler, **fields},
    )


def test_a_turn_past_its_agents_time_limit_is_stopped_and_fails(rpc, stored):
    _agent("sleepy", "sleeper", config={"seconds": 60}, turn_timeout=1)
    started = time.monotonic()
    task = rpc("SendMessage", user_message("take your time", f"sleepy-{uuid.uuid4()}"), agent="sleepy")
    task = task["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert "limit of 1 s" in task["status"]["message"]["parts"][0]["text"]
    assert time.monotonic() - started < 15


def test_a_turn_whose_agent_cannot_be_built_fails_at_once_with_the_reason(rpc, stored):
    # The handler's constructor refuses this config (float("soon")): the turn is claimed,
    # and must fail now, not wait out its lease on every attempt as if its worker were lost.
    _agent("misconfigured", "sleeper", config={"seconds": "soon"})
    started = time.monotonic()
    task = rpc("SendMessage", user_message("hello?", f"misconfigured-{uuid.uuid4()}"), agent="misconfigured")
    task = task["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_FAILED", task
    assert "ValueError" in task["status"]["message"]["parts"][0]["text"]
    assert time.monotonic() - started < 8
    history = rpc("GetTask", {"id": task["id"]}, agent="misconfigured")["result"]["history"]
    assert not any("restarted" in part.get("text", "") for m in history for part in m["parts"]), history


def _state(rpc, task_id: str) -> str:
    return rpc("GetTask", {"id": task_id}, agent="stubborn")["result"]["status"]["state"]


def test_cancel_stops_an_agent_that_swallows_cancellation_and_frees_its_worker(rpc, server, stored):
    _agent("stubborn", "stubborn")
    # As many stubborn turns as there are worker threads: if a canceled one kept
    # its thread, nothing else would ever run.
    task_ids = []
    for n in range(WORKER_THREADS):
        params = {**user_message(f"never stop {n}", f"stubborn-{uuid.uuid4()}"), "configuration": {}}
        params["configuration"]["returnImmediately"] = True
        task_ids.append(rpc("SendMessage", params, agent="stubborn")["result"]["task"]["id"])
    deadline = time.monotonic() + 30
    while any(_state(rpc, task_id) != "TASK_STATE_WORKING" for task_id in task_ids):
        assert time.monotonic() < deadline, "the stubborn turns did not all start"
        time.sleep(0.2)
    for task_id in task_ids:
        canceled = rpc("CancelTask", {"id": task_id}, agent="stubborn")["result"]
        assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    started = time.monotonic()
    echo = rpc("SendMessage", user_message("anyone free?", f"after-stubborn-{uuid.uuid4()}"))["result"][
        "task"
    ]
    assert echo["status"]["state"] == "TASK_STATE_COMPLETED"
    # Stopped by force within 10 s: the worker threads were free again.
    assert time.monotonic() - started < 15
    assert all(_state(rpc, task_id) == "TASK_STATE_CANCELED" for task_id in task_ids)
    httpx.get(f"{server.base_url}/healthz", timeout=5).raise_for_status()
