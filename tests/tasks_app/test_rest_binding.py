"""The HTTP+JSON binding: REST paths, the /{tenant} prefix form, google.rpc.Status errors."""

import json
import uuid

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.helpers import new_text_message
from a2a.types import GetTaskRequest, ListTasksRequest, Role, SendMessageRequest, TaskState

from tests.conftest import user_message
from tests.sse import read_events, stream

HEADERS = {"A2A-Version": "1.0"}


def rest(server, path: str) -> str:
    return server.agent_url("echo") + "rest/" + path


def send(server, text: str = "hi") -> dict:
    response = httpx.post(
        rest(server, "message:send"),
        json=user_message(text, f"rest-{uuid.uuid4()}"),
        headers=HEADERS,
        timeout=30,
    )
    assert response.status_code == 200, response.text
    # No Accept asking for application/a2a+json: plain JSON.
    assert response.headers["content-type"] == "application/json"
    return response.json()["task"]


def error_reason(response: httpx.Response) -> str:
    body = response.json()["error"]
    assert body["code"] == response.status_code
    info = next(d for d in body["details"] if d["@type"].endswith("ErrorInfo"))
    assert info["domain"] == "a2a-protocol.org"
    return info["reason"]


@pytest.mark.parametrize("streaming", [False, True], ids=["blocking", "streaming"])
async def test_sdk_client_over_http_json_completes_the_echo_task(server, streaming):
    config = ClientConfig(
        streaming=streaming, supported_protocol_bindings=["HTTP+JSON"], use_client_preference=True
    )
    client = await create_client(server.agent_url("echo"), client_config=config)
    try:
        request = SendMessageRequest(message=new_text_message("over rest", role=Role.ROLE_USER))
        events = [event async for event in client.send_message(request)]
        task_id = events[0].task.id
        fetched = await client.get_task(GetTaskRequest(id=task_id))
        listed = await client.list_tasks(ListTasksRequest(context_id=fetched.context_id))
    finally:
        await client.close()
    assert fetched.status.state == TaskState.TASK_STATE_COMPLETED
    assert "over rest" in fetched.artifacts[0].parts[0].text
    assert [task.id for task in listed.tasks] == [task_id]


def test_rest_paths_with_and_without_the_tenant_prefix(server):
    task = send(server)
    plain = httpx.get(rest(server, f"tasks/{task['id']}"), headers=HEADERS).json()
    prefixed = httpx.get(rest(server, f"demo/tasks/{task['id']}"), headers=HEADERS).json()
    assert plain == prefixed
    assert plain["status"]["state"] == "TASK_STATE_COMPLETED"
    other = httpx.get(rest(server, f"globex/tasks/{task['id']}"), headers=HEADERS)
    assert other.status_code == 400
    assert "tenant" in other.json()["error"]["message"]


def test_a_tenant_named_like_a_route_is_served_under_its_prefix(server, stored):
    from agents.models import Agent
    from tenants.models import Tenant

    tenant, _ = Tenant.objects.get_or_create(slug="tasks", defaults={"name": "Tasks Inc"})
    Agent.objects.get_or_create(
        tenant=tenant, slug="echo", defaults={"name": "Echo", "handler": "echo", "visibility": "public"}
    )
    try:
        _serve_a_tenant_named_tasks(server)
    finally:
        tenant.delete()  # its agent and task with it: other tests list tenants


def _serve_a_tenant_named_tasks(server):
    base = server.agent_url("echo", tenant="tasks") + "rest/"
    sent = httpx.post(
        base + "tasks/message:send", json=user_message("hi", f"rest-{uuid.uuid4()}"), headers=HEADERS
    )
    assert sent.status_code == 200, sent.text
    task_id = sent.json()["task"]["id"]
    # What an SDK client sends there: the tenant's prefix, then the route.
    listed = httpx.get(base + "tasks/tasks", headers=HEADERS)
    assert listed.status_code == 200, listed.text
    assert task_id in [task["id"] for task in listed.json()["tasks"]]
    card = httpx.get(base + "tasks/extendedAgentCard", headers=HEADERS)
    # Answered as the extended card is at any public echo (it has none), not as a task "extendedAgentCard".
    demo_card = httpx.get(rest(server, "extendedAgentCard"), headers=HEADERS)
    assert card.status_code == demo_card.status_code and error_reason(card) == error_reason(demo_card)
    assert error_reason(card) != "TASK_NOT_FOUND"
    # The paths without the prefix still work.
    for path in (f"tasks/{task_id}", f"tasks/tasks/{task_id}"):
        got = httpx.get(base + path, headers=HEADERS)
        assert got.status_code == 200 and got.json()["id"] == task_id, (path, got.text)
    assert httpx.get(base + "tasks", headers=HEADERS).status_code == 200


def test_rest_errors_are_google_rpc_status_with_reasons(server):
    task = send(server)
    missing = httpx.get(rest(server, f"tasks/{uuid.uuid4()}"), headers=HEADERS)
    assert missing.status_code == 404 and error_reason(missing) == "TASK_NOT_FOUND"
    # An empty body and a JSON null body are both accepted on :cancel.
    for content in (b"", b"null"):
        cancel = httpx.post(rest(server, f"tasks/{task['id']}:cancel"), content=content, headers=HEADERS)
        assert cancel.status_code == 400 and error_reason(cancel) == "TASK_NOT_CANCELABLE"
    for verb in ("GET", "POST"):
        subscribe = httpx.request(verb, rest(server, f"tasks/{task['id']}:subscribe"), headers=HEADERS)
        assert subscribe.status_code == 400 and error_reason(subscribe) == "UNSUPPORTED_OPERATION"
    no_version = httpx.get(rest(server, f"tasks/{task['id']}"))
    assert no_version.status_code == 400 and error_reason(no_version) == "VERSION_NOT_SUPPORTED"
    bad_body = httpx.post(
        rest(server, "message:send"),
        content=b"{nope",
        headers={**HEADERS, "Content-Type": "application/json"},
    )
    assert bad_body.status_code == 400 and error_reason(bad_body) == "INVALID_REQUEST"
    no_parts = httpx.post(
        rest(server, "message:send"),
        json={"message": {"role": "ROLE_USER", "messageId": "x", "parts": []}},
        headers=HEADERS,
    )
    assert no_parts.status_code == 400 and error_reason(no_parts) == "INVALID_PARAMS"
    assert httpx.delete(rest(server, "message:send"), headers=HEADERS).status_code == 405
    assert httpx.get(rest(server, "no/such/thing"), headers=HEADERS).status_code == 404
    # An empty path, and names no agent has (as JSON-RPC's route takes them): JSON, not Django's page.
    base = server.agent_url("echo").split("/a2a/")[0]
    for url in (rest(server, ""), f"{base}/a2a/Demo_X/echo/rest/tasks", f"{base}/a2a/demo/Echo_2/rest/tasks"):
        answer = httpx.get(url, headers=HEADERS)
        assert answer.status_code == 404, url
        assert answer.headers["content-type"].startswith("application/json"), (url, answer.text[:200])


def test_rest_list_tasks_reads_filters_from_the_query(server):
    first = send(server, "one")
    context_id = first["contextId"]
    second = httpx.post(
        rest(server, "message:send"),
        json=user_message("two", f"rest-{uuid.uuid4()}", contextId=context_id),
        headers=HEADERS,
        timeout=30,
    ).json()["task"]
    page = httpx.get(
        rest(server, "tasks"),
        params={"contextId": context_id, "pageSize": "1", "includeArtifacts": "true", "historyLength": "0"},
        headers=HEADERS,
    ).json()
    assert page["totalSize"] == 2 and page["pageSize"] == 1
    assert [task["id"] for task in page["tasks"]] == [second["id"]]
    assert "artifacts" in page["tasks"][0] and "history" not in page["tasks"][0]
    rest_page = httpx.get(
        rest(server, "tasks"),
        params={"contextId": context_id, "pageToken": page["nextPageToken"]},
        headers=HEADERS,
    ).json()
    assert [task["id"] for task in rest_page["tasks"]] == [first["id"]]
    assert rest_page["nextPageToken"] == ""
    assert "artifacts" not in rest_page["tasks"][0]
    bad = httpx.get(rest(server, "tasks"), params={"status": "TASK_STATE_NONSENSE"}, headers=HEADERS)
    assert bad.status_code in (200, 400)


def test_rest_stream_has_no_json_rpc_envelope_and_ids_are_log_positions(server):
    with stream(rest(server, "message:stream"), user_message("streamed", f"rest-{uuid.uuid4()}")) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = list(read_events(response))
    assert [list(event["data"]) for event in events] == [
        ["task"],
        ["statusUpdate"],
        ["artifactUpdate"],
        ["statusUpdate"],
    ]
    assert [event["id"] for event in events] == ["1", "2", "3", "4"]
    assert events[-1]["data"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_rest_answers_application_a2a_json_to_a_client_that_accepts_it(server):
    task = send(server)
    accepting = {**HEADERS, "Accept": "application/json;q=0.5, application/a2a+json"}
    fetched = httpx.get(rest(server, f"tasks/{task['id']}"), headers=accepting)
    assert fetched.status_code == 200 and fetched.headers["content-type"] == "application/a2a+json"
    missing = httpx.get(rest(server, f"tasks/{uuid.uuid4()}"), headers=accepting)
    assert missing.status_code == 404 and missing.headers["content-type"] == "application/a2a+json"
    plain = httpx.get(rest(server, f"tasks/{task['id']}"), headers={**HEADERS, "Accept": "*/*"})
    assert plain.headers["content-type"] == "application/json"


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "text/xml"])
def test_rest_refuses_a_body_it_cannot_read_with_415(server, content_type):
    body = json.dumps(user_message("typed", f"rest-{uuid.uuid4()}")).encode()
    response = httpx.post(
        rest(server, "message:send"), content=body, headers={**HEADERS, "Content-Type": content_type}
    )
    assert response.status_code == 415
    assert response.json()["error"]["code"] == 415
    assert error_reason(response) == "CONTENT_TYPE_NOT_SUPPORTED"
    for accepted in ("application/json", "application/a2a+json", "application/json; charset=utf-8"):
        headers = {**HEADERS, "Content-Type": accepted}
        ok = httpx.post(rest(server, "message:send"), content=body, headers=headers, timeout=30)
        assert ok.status_code == 200, ok.text


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded"])
def test_json_rpc_refuses_a_body_that_is_not_json_typed_with_32005(server, content_type):
    body = {"jsonrpc": "2.0", "id": "typed-1", "method": "SendMessage"}
    body["params"] = user_message("typed", f"rpc-{uuid.uuid4()}")
    response = httpx.post(
        server.agent_url("echo"),
        content=json.dumps(body).encode(),
        headers={**HEADERS, "Content-Type": content_type},
    )
    answer = response.json()
    assert answer["id"] == "typed-1"
    assert answer["error"]["code"] == -32005
    assert answer["error"]["data"][0]["reason"] == "CONTENT_TYPE_NOT_SUPPORTED"
