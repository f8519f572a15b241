"""Runaway turns: a time limit per agent, and a cancel that stops even an agent that will not stop."""

import time
import uuid

import httpx
import pytest

from agents.models import Agent
from tenants.models import Tenant
from tests.conftest import SERVICES_MODE, rpc_to, user_message
from tests.live import start_web

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


@pytest.mark.skipif(SERVICES_MODE, reason="the turn runs in the web process only on the embedded default")
def test_an_agent_that_swallows_its_cancellation_never_runs_again_on_its_thread(stored, db_settings, log_dir):
    # One worker thread: the stubborn agent is canceled, swallows it, and is abandoned on the
    # thread's loop; the next turn (a sleeper, 1.5 s on that thread) must not bring it back to life.
    _agent("stubborn-ticker", "ticker", config={"seconds": 60, "swallow": True})
    _agent("sleeper-next", "sleeper", config={"seconds": 1.5})
    ticks = log_dir / f"ticks-{uuid.uuid4().hex}.txt"
    ticks.write_text("")
    web = start_web(
        db_settings,
        log_dir,
        name="web-stubborn-ticker",
        extra_env={"EMBEDDED_WORKER_THREADS": "1", "A2A_TEST_TICKS": str(ticks)},
    )

    def call(agent: str, method: str, params: dict) -> dict:
        return rpc_to(web, method, params, agent=agent)["result"]

    try:
        params = user_message("tick", f"stubborn-ticker-{uuid.uuid4()}")
        params["configuration"] = {"returnImmediately": True}
        task_id = call("stubborn-ticker", "SendMessage", params)["task"]["id"]
        assert _wait(lambda: ticks.read_text().count("\n") >= 5, 30), "the ticker never got going"
        canceled = call("stubborn-ticker", "CancelTask", {"id": task_id})
        assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
        assert _wait(lambda: "ignored its cancellation; abandoned" in web.processes[0].output(), 30)
        # The loop is closed once the turn is over (the agent's cancel() has had its chance).
        assert _wait(lambda: "Closed a worker thread's loop" in web.processes[0].output(), 30)
        abandoned_at = time.time()
        answer = call("sleeper-next", "SendMessage", user_message("next", f"sleeper-next-{uuid.uuid4()}"))
        assert answer["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        late = [line for line in ticks.read_text().splitlines() if float(line.split()[2]) > abandoned_at]
        assert late == [], f"the abandoned agent ticked on during the thread's next turn: {len(late)} ticks"
    finally:
        web.stop()


def _wait(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True
