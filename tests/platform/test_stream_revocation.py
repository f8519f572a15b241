"""A stream outlives its request: a caller whose credentials go meanwhile loses the stream.

A client subscribes to its task with a token; the token is then revoked at the
revocation endpoint, and the task goes on (answered with another token of the
same client). The open stream must end with the refusal, and carry nothing of
what the task did after the revocation. The live server checks a stream's
caller every A2A_STREAM_RECHECK seconds (tests/live.py sets it short).
"""

import json
import time

import grpc
import httpx
import pytest
from a2a.types import a2a_pb2 as pb
from a2a.types import a2a_pb2_grpc

from agents.models import Agent
from tests.api import tenancy
from tests.api.tenancy import new_message
from tests.live import STREAM_RECHECK

trio = tenancy.trio

ANSWER = "ultramarine"


@pytest.fixture
def asker(trio):
    """An authenticated agent of acme whose tasks ask once, then finish with the answer in an artifact."""
    Agent.objects.update_or_create(
        tenant=trio.tenants["acme"],
        slug="asker",
        defaults={"name": "Asker", "handler": "push-ask", "visibility": Agent.Visibility.AUTHENTICATED},
    )
    yield "asker"
    Agent.objects.filter(tenant=trio.tenants["acme"], slug="asker").delete()


def _headers(trio, token: str) -> dict:
    return {"A2A-Version": "1.0", **trio.auth(token)}


def _waiting_task(trio, token: str) -> str:
    answer = httpx.post(
        f"{trio.base_url}/a2a/acme/asker/",
        json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": new_message("colour?")},
        headers=_headers(trio, token),
        timeout=30,
    )
    task = answer.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task
    return task["id"]


def _revoke(trio, token: str) -> None:
    client = trio.clients["acme"]
    revoked = httpx.post(
        f"{trio.base_url}/o/revoke_token/", data={"token": token}, auth=(client.client_id, client.secret)
    )
    assert revoked.status_code == 200


def _answer(trio, task_id: str) -> None:
    """The task's next turn, sent with another token of the same client: it completes with ANSWER."""
    other = trio.client_credentials_token(trio.clients["acme"]).json()["access_token"]
    answer = httpx.post(
        f"{trio.base_url}/a2a/acme/asker/",
        json={
            "jsonrpc": "2.0",
            "id": 2,
            "method": "SendMessage",
            "params": new_message(ANSWER, taskId=task_id),
        },
        headers=_headers(trio, other),
        timeout=30,
    )
    assert answer.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answer.text


def _subscribe(trio, binding: str, task_id: str, token: str):
    if binding in ("jsonrpc", "v03"):
        # A2A 1.0's method, or 0.3's (sent without an A2A-Version header).
        method, headers = "SubscribeToTask", _headers(trio, token)
        if binding == "v03":
            method, headers = "tasks/resubscribe", trio.auth(token)
        body = {"jsonrpc": "2.0", "id": "sub", "method": method, "params": {"id": task_id}}
        return httpx.stream(
            "POST", f"{trio.base_url}/a2a/acme/asker/", json=body, headers=headers, timeout=30
        )
    url = f"{trio.base_url}/a2a/acme/asker/rest/tasks/{task_id}:subscribe"
    return httpx.stream("GET", url, headers=_headers(trio, token), timeout=30)


@pytest.mark.parametrize("binding", ["jsonrpc", "rest", "v03"])
def test_a_stream_whose_token_is_revoked_ends_before_the_tasks_next_events(trio, asker, binding):
    token = trio.client_credentials_token(trio.clients["acme"]).json()["access_token"]
    task_id = _waiting_task(trio, token)
    with _subscribe(trio, binding, task_id, token) as stream:
        assert stream.status_code == 200
        frames = (
            json.loads(line[len("data: ") :]) for line in stream.iter_lines() if line.startswith("data: ")
        )
        first = next(frames)
        assert task_id in json.dumps(first)
        _revoke(trio, token)
        # The stream's caller was checked when it opened: the next check is due after the interval.
        time.sleep(STREAM_RECHECK * 2)
        _answer(trio, task_id)
        rest = list(frames)
    # The old code went on: the answer's artifact and the completion came down the revoked stream.
    assert ANSWER not in json.dumps(rest)
    assert len(rest) == 1, rest
    if binding in ("jsonrpc", "v03"):
        assert rest[0]["id"] == "sub" and "result" not in rest[0]
        assert rest[0]["error"]["code"] == -32600
        assert rest[0]["error"]["message"] == "The access token is invalid, expired or revoked"
    else:
        assert rest[0]["error"]["code"] == 401
        assert rest[0]["error"]["status"] == "UNAUTHENTICATED"
        assert rest[0]["error"]["message"] == "The access token is invalid, expired or revoked"


def test_a_grpc_stream_whose_token_is_revoked_ends_unauthenticated(trio, asker, server):
    token = trio.client_credentials_token(trio.clients["acme"]).json()["access_token"]
    task_id = _waiting_task(trio, token)
    metadata = (("authorization", f"Bearer {token}"), ("a2a-version", "1.0"))
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        stream = stub.SubscribeToTask(
            pb.SubscribeToTaskRequest(tenant="acme/asker", id=task_id), metadata=metadata
        )
        first = next(stream)
        assert first.task.id == task_id
        _revoke(trio, token)
        time.sleep(STREAM_RECHECK * 2)
        _answer(trio, task_id)
        received = []
        with pytest.raises(grpc.RpcError) as ended:
            for event in stream:
                received.append(event)
    assert ended.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert ended.value.details() == "The access token is invalid, expired or revoked"
    assert ANSWER not in str(received)


def test_a_stream_of_a_browser_session_ends_when_the_session_signs_out(trio, asker):
    from django.test import Client

    token = trio.client_credentials_token(trio.clients["acme"]).json()["access_token"]
    task_id = _waiting_task(trio, token)
    # bob, an operator of acme, follows the client's task from his browser session.
    browser = Client()
    browser.force_login(trio.users["bob"])
    csrf = "c" * 32
    body = {"jsonrpc": "2.0", "id": "sub", "method": "SubscribeToTask", "params": {"id": task_id}}
    with httpx.stream(
        "POST",
        f"{trio.base_url}/a2a/acme/asker/",
        json=body,
        headers={"A2A-Version": "1.0", "X-CSRFToken": csrf},
        cookies={"sessionid": browser.cookies["sessionid"].value, "csrftoken": csrf},
        timeout=30,
    ) as stream:
        assert stream.status_code == 200
        frames = (
            json.loads(line[len("data: ") :]) for line in stream.iter_lines() if line.startswith("data: ")
        )
        assert next(frames)["result"]["task"]["id"] == task_id
        browser.logout()
        time.sleep(STREAM_RECHECK * 2)
        _answer(trio, task_id)
        rest = list(frames)
    assert ANSWER not in json.dumps(rest)
    assert [frame["error"]["code"] for frame in rest] == [-32600], rest
    assert rest[0]["error"]["message"] == "The session is over, or no longer has this agent's tenant"


def test_an_anonymous_stream_ends_when_its_agent_stops_being_public(trio):
    from django.test import Client

    agent, _ = Agent.objects.update_or_create(
        tenant=trio.tenants["acme"],
        slug="open-asker",
        defaults={"name": "Open asker", "handler": "push-ask", "visibility": Agent.Visibility.PUBLIC},
    )
    url = f"{trio.base_url}/a2a/acme/open-asker/"
    browser = Client()
    try:
        asked = httpx.post(
            url,
            json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": new_message("colour?")},
            headers={"A2A-Version": "1.0"},
            timeout=30,
        )
        task_id = asked.json()["result"]["task"]["id"]
        body = {"jsonrpc": "2.0", "id": "sub", "method": "SubscribeToTask", "params": {"id": task_id}}
        with httpx.stream("POST", url, json=body, headers={"A2A-Version": "1.0"}, timeout=30) as stream:
            frames = (
                json.loads(line[len("data: ") :]) for line in stream.iter_lines() if line.startswith("data: ")
            )
            assert next(frames)["result"]["task"]["id"] == task_id
            Agent.objects.filter(pk=agent.pk).update(visibility=Agent.Visibility.AUTHENTICATED)
            time.sleep(STREAM_RECHECK * 2)
            # bob, an operator, answers the anonymous caller's question from his browser session.
            browser.force_login(trio.users["bob"])
            csrf = "c" * 32
            answered = httpx.post(
                url,
                json={
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "SendMessage",
                    "params": new_message(ANSWER, taskId=task_id),
                },
                headers={"A2A-Version": "1.0", "X-CSRFToken": csrf},
                cookies={"sessionid": browser.cookies["sessionid"].value, "csrftoken": csrf},
                timeout=30,
            )
            assert answered.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", (
                answered.text
            )
            rest = list(frames)
    finally:
        browser.logout()
        agent.delete()
    assert ANSWER not in json.dumps(rest)
    assert [frame["error"]["code"] for frame in rest] == [-32600], rest
    assert rest[0]["error"]["message"].startswith("Authentication required")


def _frames_within(stream, seconds: float):
    """The stream's data frames; the test fails if it is still open after `seconds` (read at each line)."""
    ends = time.monotonic() + seconds
    for line in stream.iter_lines():
        if time.monotonic() > ends:
            pytest.fail(f"the stream was still open after {seconds:g} s")
        if line.startswith("data: "):
            yield json.loads(line[len("data: ") :])


def test_a_stream_ends_when_its_agent_is_disabled(trio, asker):
    token = trio.client_credentials_token(trio.clients["acme"]).json()["access_token"]
    task_id = _waiting_task(trio, token)
    try:
        with _subscribe(trio, "jsonrpc", task_id, token) as stream:
            # The old code kept it open while the task waited (a heartbeat every 15 s, for ever).
            frames = _frames_within(stream, 12)
            assert next(frames)["result"]["task"]["id"] == task_id
            Agent.objects.filter(tenant=trio.tenants["acme"], slug=asker).update(enabled=False)
            rest = list(frames)
        assert rest == []
        # A reconnect hears why.
        again = httpx.post(
            f"{trio.base_url}/a2a/acme/asker/",
            json={"jsonrpc": "2.0", "id": 3, "method": "SubscribeToTask", "params": {"id": task_id}},
            headers=_headers(trio, token),
            timeout=30,
        )
        assert again.json()["error"]["message"] == "No agent at this URL"
    finally:
        Agent.objects.filter(tenant=trio.tenants["acme"], slug=asker).update(enabled=True)
