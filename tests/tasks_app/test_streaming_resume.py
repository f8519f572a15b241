"""Streams lose nothing: Last-Event-ID resumes from the stored log on any web process."""

import time
import uuid

import httpx
import pytest

from tasks_app.models import Task, TaskEvent
from tests.conftest import user_message
from tests.live import start_web
from tests.sse import read_events, stream


@pytest.fixture
def second_web(db_settings, log_dir):
    """Another web process on the same database (and, in services mode, the same Redis)."""
    other = start_web(db_settings, log_dir, name="web2")
    yield other
    other.stop()


def _progress_request(duration: float = 3.0) -> dict:
    return user_message("work slowly", f"resume-{uuid.uuid4()}")


def test_reconnecting_to_another_process_with_last_event_id_misses_nothing(server, second_web, stored):
    seen = []
    with stream(
        server.agent_url("progress"),
        {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": _progress_request()},
    ) as response:
        for event in read_events(response):
            seen.append(event)
            if len(seen) == 3:
                break  # the client drops the connection mid-task
    task_id = seen[0]["data"]["result"]["task"]["id"]
    last_id = seen[-1]["id"]
    body = {"jsonrpc": "2.0", "id": 2, "method": "SubscribeToTask", "params": {"id": task_id}}
    with stream(second_web.agent_url("progress"), body, headers={"Last-Event-ID": last_id}) as response:
        resumed = list(read_events(response))
    ids = [int(event["id"]) for event in seen + resumed]
    assert ids == list(range(1, len(ids) + 1)), ids
    stored_log = list(TaskEvent.objects.filter(task_id=task_id).order_by("seq").values_list("seq", "payload"))
    assert [(int(e["id"]), e["data"]["result"]) for e in seen + resumed] == stored_log
    assert resumed[-1]["data"]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_a_dropped_stream_does_not_cancel_the_task(server, rpc, stored):
    with stream(
        server.agent_url("progress"),
        {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": _progress_request()},
    ) as response:
        first = next(read_events(response))
    task_id = first["data"]["result"]["task"]["id"]
    deadline = time.monotonic() + 20
    while Task.objects.get(pk=task_id).state != "completed" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert (
        rpc("GetTask", {"id": task_id}, agent="progress")["result"]["status"]["state"]
        == "TASK_STATE_COMPLETED"
    )


def test_subscribe_without_last_event_id_starts_with_the_current_task(server, rpc):
    params = {**_progress_request(), "configuration": {"returnImmediately": True}}
    task = rpc("SendMessage", params, agent="progress")["result"]["task"]
    body = {"jsonrpc": "2.0", "id": 3, "method": "SubscribeToTask", "params": {"id": task["id"]}}
    with stream(server.agent_url("progress"), body) as response:
        events = list(read_events(response))
    assert list(events[0]["data"]["result"]) == ["task"]
    assert events[0]["data"]["result"]["task"]["id"] == task["id"]
    ids = [int(event["id"]) for event in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert events[-1]["data"]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_idle_streams_get_heartbeat_comments(server, db_settings, log_dir, rpc):
    quick = start_web(db_settings, log_dir, name="web-heartbeat", extra_env={"A2A_SSE_HEARTBEAT": "0.5"})
    try:
        params = {**_progress_request(), "configuration": {"returnImmediately": True}}
        task = rpc("SendMessage", params, agent="clarify")["result"]["task"]
        # Subscribed to while it waits for input, the stream stays open and idle; before
        # that, the input-required event would close it. Under load the turn may lag.
        deadline = time.monotonic() + 20
        while rpc("GetTask", {"id": task["id"]}, agent="clarify")["result"]["status"]["state"] != (
            "TASK_STATE_INPUT_REQUIRED"
        ):
            assert time.monotonic() < deadline, "the clarify task never asked its question"
            time.sleep(0.1)
        body = {"jsonrpc": "2.0", "id": 4, "method": "SubscribeToTask", "params": {"id": task["id"]}}
        comments = 0
        with httpx.stream(
            "POST", quick.agent_url("clarify"), json=body, headers={"A2A-Version": "1.0"}, timeout=10
        ) as response:
            started = time.monotonic()
            for line in response.iter_lines():
                comments += line.startswith(":")
                if comments >= 2 or time.monotonic() - started > 8:
                    break
        assert comments >= 2
    finally:
        quick.stop()
