"""Edges of resumed streams: Last-Event-ID past the log, malformed, or after the final event.

A stream must end: a resumed subscription to a task that is over closes at
once, and a Last-Event-ID the task's log never reached is the client's error,
answered before any streaming starts.
"""

import asyncio
import json
import time
import uuid

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import SubscribeToTaskRequest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError
from django.db import OperationalError

from tasks_app.access import Caller
from tasks_app.events import payload_state
from tasks_app.models import Task
from tasks_app.protocol import operations
from tasks_app.protocol.call import Call
from tests.conftest import user_message
from tests.sse import read_events, stream

HEADERS = {"A2A-Version": "1.0"}
# Well under the server's heartbeat (15 s): a stream still open after this never
# got its end, it only sat there.
CLOSES_WITHIN = 10.0


@pytest.fixture(scope="module")
def slow(stored) -> str:
    """A progress agent that takes long enough to be running while a test looks at it."""
    from agents.models import Agent
    from tenants.models import Tenant

    Agent.objects.update_or_create(
        tenant=Tenant.objects.get(slug="demo"),
        slug="slow-progress",
        defaults={
            "name": "slow-progress",
            "handler": "progress",
            "config": {"duration": 12},
            "visibility": Agent.Visibility.PUBLIC,
            "enabled": True,
        },
    )
    return "slow-progress"


def _start(rpc, agent: str, text: str = "edge") -> dict:
    params = {**user_message(text, f"edge-{uuid.uuid4()}"), "configuration": {"returnImmediately": True}}
    return rpc("SendMessage", params, agent=agent)["result"]["task"]


def _wait_for_seq(task_id: str, at_least: int) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        seq = Task.objects.values_list("event_seq", flat=True).get(pk=task_id)
        if seq >= at_least:
            return seq
        time.sleep(0.1)
    raise AssertionError(f"task {task_id} never reached seq {at_least}")


def _subscribe(server, binding: str, agent: str, task_id: str, last_event_id) -> httpx.Response:
    """SubscribeToTask with a Last-Event-ID, answered in full (a JSON error or a stream that ended).

    Fails when the answer is a stream still open after CLOSES_WITHIN seconds.
    """
    headers = {**HEADERS, "Last-Event-ID": last_event_id}
    if binding == "jsonrpc":
        body = {"jsonrpc": "2.0", "id": "sub-1", "method": "SubscribeToTask", "params": {"id": task_id}}
        request = ("POST", server.agent_url(agent), body)
    else:
        request = ("GET", f"{server.agent_url(agent)}rest/tasks/{task_id}:subscribe", None)
    verb, url, body = request
    started = time.monotonic()
    timeout = httpx.Timeout(30, read=CLOSES_WITHIN + 10)
    with httpx.stream(verb, url, json=body, headers=headers, timeout=timeout) as response:
        chunks = []
        for chunk in response.iter_bytes():
            chunks.append(chunk)
            assert time.monotonic() - started < CLOSES_WITHIN, (
                f"stream still open after {CLOSES_WITHIN}s: {b''.join(chunks)[:500]!r}"
            )
        answer = httpx.Response(response.status_code, headers=response.headers, content=b"".join(chunks))
    assert time.monotonic() - started < CLOSES_WITHIN, "the stream took too long to close"
    return answer


def _sse_events(response: httpx.Response) -> list[dict]:
    events = []
    for block in response.text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":"))
        if "data" in fields:
            events.append({"id": fields.get("id"), "data": json.loads(fields["data"])})
    return events


def _assert_invalid_params(response: httpx.Response, binding: str, words: str) -> str:
    """The answer is InvalidParams (JSON-RPC -32602 / HTTP 400), not a stream; returns its message."""
    assert response.headers["content-type"].startswith("application/"), response.text[:300]
    if binding == "jsonrpc":
        assert response.status_code == 200
        error = response.json()["error"]
        assert error["code"] == -32602, error
    else:
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["status"] == "INVALID_ARGUMENT", error
        info = next(d for d in error["details"] if d["@type"].endswith("ErrorInfo"))
        assert info["reason"] == "INVALID_PARAMS"
    assert words in error["message"], error["message"]
    return error["message"]


@pytest.mark.parametrize("binding", ["jsonrpc", "rest"])
@pytest.mark.parametrize("last_event_id", ["50", "99999999999999999999999"])
def test_last_event_id_beyond_a_running_tasks_log_is_invalid_params(
    server, rpc, slow, binding, last_event_id
):
    task = _start(rpc, slow)
    _wait_for_seq(task["id"], 3)
    response = _subscribe(server, binding, slow, task["id"], last_event_id)
    message = _assert_invalid_params(response, binding, "beyond")
    assert last_event_id in message
    assert Task.objects.get(pk=task["id"]).state in ("submitted", "working")


@pytest.mark.parametrize("binding", ["jsonrpc", "rest"])
@pytest.mark.parametrize("last_event_id", ["-1", "abc", "1.5", "0x10", "1 2", b"\xb2", b"1\xb3"])
def test_a_malformed_last_event_id_is_invalid_params(server, rpc, binding, last_event_id):
    # b"\xb2" is '²' and b"1\xb3" is '1³' (headers are latin-1): str.isdigit() says yes to both.
    task = rpc("SendMessage", user_message("done", f"edge-{uuid.uuid4()}"))["result"]["task"]
    response = _subscribe(server, binding, "echo", task["id"], last_event_id)
    _assert_invalid_params(response, binding, "Last-Event-ID")


@pytest.mark.parametrize("last_event_id", ["abc", "-1", "50"])
def test_methods_that_answer_no_stream_ignore_last_event_id(server, rpc, last_event_id):
    # The header means something to a stream only; a client whose shared headers carry
    # one (an SDK client's httpx client) got -32602 / 400 on GetTask and the rest.
    task = rpc("SendMessage", user_message("done", f"edge-{uuid.uuid4()}"))["result"]["task"]
    headers = {**HEADERS, "Last-Event-ID": last_event_id}
    url = server.agent_url("echo")
    for method, params in (
        ("GetTask", {"id": task["id"]}),
        ("ListTasks", {"contextId": task["contextId"]}),
        ("CancelTask", {"id": task["id"]}),  # completed: -32002, not the header's -32602
        ("ListTaskPushNotificationConfigs", {"taskId": task["id"]}),
        ("SendMessage", user_message("again", f"edge-{uuid.uuid4()}")),
    ):
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        answer = httpx.post(url, json=body, headers=headers, timeout=30).json()
        if method == "CancelTask":
            assert answer["error"]["code"] == -32002, answer
        else:
            assert "result" in answer, (method, answer)
    for path in (f"tasks/{task['id']}", "tasks", f"tasks/{task['id']}/pushNotificationConfigs"):
        answer = httpx.get(f"{url}rest/{path}", headers=headers, timeout=30)
        assert answer.status_code == 200, (path, answer.text[:300])
    sent = httpx.post(
        f"{url}rest/message:send", json=user_message("rest", f"edge-{uuid.uuid4()}"), headers=headers
    )
    assert sent.status_code == 200, sent.text[:300]
    # The 0.3 dialect (no A2A-Version) too.
    body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": task["id"]}}
    answer = httpx.post(url, json=body, headers={"Last-Event-ID": last_event_id}, timeout=30).json()
    assert answer["result"]["id"] == task["id"], answer


@pytest.mark.parametrize("binding", ["jsonrpc", "rest"])
def test_reconnecting_after_the_final_event_closes_the_stream_at_once(server, binding):
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendStreamingMessage",
        "params": user_message("all of it", f"edge-{uuid.uuid4()}"),
    }
    with stream(server.agent_url("echo"), body) as response:
        seen = list(read_events(response))
    assert seen[-1]["data"]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    task_id, final_id = seen[0]["data"]["result"]["task"]["id"], seen[-1]["id"]

    response = _subscribe(server, binding, "echo", task_id, final_id)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert _sse_events(response) == []
    # One before the final event: exactly that event, then the end.
    response = _subscribe(server, binding, "echo", task_id, str(int(final_id) - 1))
    assert [event["id"] for event in _sse_events(response)] == [final_id]


def test_a_retried_streaming_send_after_the_final_event_closes_at_once(server):
    params = user_message("retry me", f"edge-{uuid.uuid4()}")
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": params}
    key = {"Idempotency-Key": f"retry-{uuid.uuid4()}"}
    with stream(server.agent_url("echo"), body, headers=key) as response:
        final_id = list(read_events(response))[-1]["id"]
    started = time.monotonic()
    # The same request and key again (a safe retry), resuming after the last event the client saw.
    with stream(server.agent_url("echo"), body, headers={**key, "Last-Event-ID": final_id}) as response:
        lines = []
        for line in response.iter_lines():
            lines.append(line)
            assert time.monotonic() - started < CLOSES_WITHIN, f"stream still open: {lines}"
    assert [line for line in lines if line] == []
    assert time.monotonic() - started < CLOSES_WITHIN


def test_a_new_streaming_send_with_a_last_event_id_streams_its_new_task_from_the_start(server):
    # No Idempotency-Key: not a retry but a new task, whose stream the header cannot be
    # about (a client that sends its last id with every request, say). Ids 1 and 2 are
    # in every new task's log by the time it is read, or soon after.
    for last_event_id in ("1", "2"):
        params = user_message("new one", f"edge-{uuid.uuid4()}")
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": params}
        with stream(server.agent_url("echo"), body, headers={"Last-Event-ID": last_event_id}) as response:
            seen = list(read_events(response))
        assert "task" in seen[0]["data"]["result"], seen[0]
        assert seen[0]["id"] == "1"
        assert seen[-1]["data"]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_a_streaming_follow_up_resuming_from_before_the_question_streams_its_own_turn(server, rpc):
    # A client resuming its task's stream with the follow-up (Last-Event-ID from before the
    # agent's question) gets what it missed, the question included, and then its answer's turn:
    # the question must not end the stream (it did, before the turn began).
    asking = rpc("SendMessage", user_message("Plan it", f"edge-{uuid.uuid4()}"), agent="clarify")
    task = asking["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    asked = Task.objects.values_list("event_seq", flat=True).get(pk=task["id"])
    params = user_message("For me", f"edge-{uuid.uuid4()}", taskId=task["id"])
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": params}
    with stream(server.agent_url("clarify"), body, headers={"Last-Event-ID": "1"}) as response:
        seen = list(read_events(response))

    ids = [int(event["id"]) for event in seen]
    assert ids == list(range(2, ids[-1] + 1)) and ids[-1] > asked, ids
    states = [payload_state(event["data"]["result"]) for event in seen]
    assert "input-required" in states
    assert states[-1] == "completed", states


def test_a_retried_streaming_send_beyond_the_log_is_invalid_params(server):
    params = user_message("retry me far", f"edge-{uuid.uuid4()}")
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": params}
    key = {"Idempotency-Key": f"retry-{uuid.uuid4()}"}
    with stream(server.agent_url("echo"), body, headers=key) as response:
        final_id = int(list(read_events(response))[-1]["id"])
    resent = httpx.post(
        server.agent_url("echo"),
        json=body,
        headers={"A2A-Version": "1.0", "Last-Event-ID": str(final_id + 5), **key},
        timeout=30,
    )
    assert resent.json()["error"]["code"] == -32602
    assert f"beyond the task's log, which ends at event {final_id}" in resent.json()["error"]["message"]


def test_a_resubscriber_waits_through_input_required_and_a_reconnect_after_the_end_closes(server, rpc):
    asking = rpc("SendMessage", user_message("Plan it", f"edge-{uuid.uuid4()}"), agent="clarify")
    task = asking["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    asked = str(Task.objects.values_list("event_seq", flat=True).get(pk=task["id"]))
    body = {"jsonrpc": "2.0", "id": 2, "method": "SubscribeToTask", "params": {"id": task["id"]}}
    with stream(server.agent_url("clarify"), body, headers={"Last-Event-ID": asked}) as response:
        # The task waits for input: the resumed stream stays on until the answer moves it on.
        answer = user_message("For me", f"edge-{uuid.uuid4()}", taskId=task["id"])
        assert rpc("SendMessage", answer, agent="clarify")["result"]["task"]["status"]["state"] == (
            "TASK_STATE_COMPLETED"
        )
        resumed = list(read_events(response))
    assert int(resumed[0]["id"]) == int(asked) + 1
    assert resumed[-1]["data"]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"

    response = _subscribe(server, "jsonrpc", "clarify", task["id"], resumed[-1]["id"])
    assert response.status_code == 200 and _sse_events(response) == []


def test_a_subscription_whose_first_read_fails_is_refused_before_it_streams(rpc, stored, monkeypatch):
    # The snapshot a subscription starts with is read before the stream is answered: a store
    # that fails then is a 503 (or, the task deleted meanwhile, TaskNotFound), not a 200 whose
    # stream is cut before its first event.
    task = rpc("SendMessage", user_message("Plan it", f"edge-{uuid.uuid4()}"), agent="clarify")["result"][
        "task"
    ]
    found = Task.objects.select_related("tenant", "agent").get(pk=task["id"])
    call = Call(caller=Caller(tenant=found.tenant, agent=found.agent, principal=found.owner))

    def unreachable(task_pk):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(operations, "send_answer_at", unreachable)
    with pytest.raises(OperationalError):
        asyncio.run(operations.subscribe_to_task(call, pb.SubscribeToTaskRequest(id=task["id"])))


async def test_sdk_client_subscribing_past_the_log_gets_invalid_params(server, rpc, slow):
    task = _start(rpc, slow)
    async with httpx.AsyncClient(headers={"Last-Event-ID": "50"}, timeout=30) as http:
        client = await create_client(server.agent_url(slow), client_config=ClientConfig(httpx_client=http))
        with pytest.raises(InvalidParamsError, match="beyond"):
            async with asyncio.timeout(CLOSES_WITHIN):
                async for _event in client.subscribe(SubscribeToTaskRequest(id=task["id"])):
                    pass
