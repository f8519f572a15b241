"""LOG_FORMAT=json: every line is JSON; a request's lines carry its id, a turn's lines the task id."""

import json
import uuid

import httpx
import pytest

from tests.conftest import SERVICES_MODE, user_message
from tests.live import start_web, start_worker, stop_processes


@pytest.fixture
def json_platform(db_settings, log_dir):
    # A queue of its own: the session's worker must not take this platform's turns.
    env = {"LOG_FORMAT": "json", "CELERY_QUEUE": f"json-logs-{uuid.uuid4().hex[:8]}"}
    worker = start_worker(db_settings, log_dir, name="json-worker", extra_env=env) if SERVICES_MODE else None
    try:
        web = start_web(db_settings, log_dir, name="json-web", extra_env=env)
    except BaseException:
        if worker:
            stop_processes([worker])
        raise
    yield web, worker
    stop_processes(web.processes + ([worker] if worker else []))


def json_lines(text: str) -> list[dict]:
    # The serve command's banner is printed, not logged; everything from logging must parse.
    lines = [line for line in text.splitlines() if line.startswith("{")]
    assert lines
    return [json.loads(line) for line in lines]


def test_request_and_task_ids_are_on_their_log_lines(json_platform):
    web, worker = json_platform
    request_id = f"req-{uuid.uuid4()}"
    response = httpx.post(
        web.agent_url("echo"),
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": user_message("hi", str(uuid.uuid4())),
        },
        headers={"A2A-Version": "1.0", "X-Request-ID": request_id},
        timeout=30,
    )
    assert response.headers["X-Request-ID"] == request_id
    task_id = response.json()["result"]["task"]["id"]
    generated = httpx.get(f"{web.base_url}/a2a/demo/").headers["X-Request-ID"]
    assert generated and generated != request_id

    web_lines = json_lines(web.processes[0].output())
    answered = [line for line in web_lines if line.get("request_id") == request_id]
    assert answered and all(line["logger"] for line in answered)
    access = [line for line in answered if line["event"] == "request answered"]
    assert access[0]["path"] == "/a2a/demo/echo/" and access[0]["status"] == 200
    assert any(line.get("request_id") == generated for line in web_lines)

    worker_lines = json_lines((worker or web.processes[0]).output())
    turn = [line for line in worker_lines if task_id in line["event"] and "Turn" in line["event"]]
    # A turn writes one line at INFO, at its end, with how it ended (its start is at debug level).
    assert any(" ended: ok (handler echo" in line["event"] for line in turn), worker_lines[-10:]
    assert all(line.get("task_id") == task_id for line in turn)
    # A bad X-Request-ID is replaced, not echoed.
    odd = httpx.get(f"{web.base_url}/healthz", headers={"X-Request-ID": "not ok"})
    assert odd.headers["X-Request-ID"] != "not ok" and len(odd.headers["X-Request-ID"]) == 32
