"""A stream outlives its request: a caller who may no longer call loses the stream.

A caller subscribes to a task that waits for input; its right to the stream then
goes (a token revoked at the revocation endpoint, a browser session signed out,
a public agent made private), and the task goes on, answered by someone who may.
The open stream must end with the refusal, and carry nothing of what the task did
after it. An agent disabled ends its streams. The live server checks a stream's
caller every A2A_STREAM_RECHECK seconds (tests/live.py sets it short).
"""

import json
import time

import grpc
import httpx
import pytest
from a2a.types import a2a_pb2 as pb
from a2a.types import a2a_pb2_grpc
from django.test import Client

from agents.models import Agent
from tests.api import tenancy
from tests.api.tenancy import new_message
from tests.live import STREAM_RECHECK

trio = tenancy.trio

ANSWER = "ultramarine"
TOKEN_GONE = "The access token is invalid, expired or revoked"


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


@pytest.fixture
def bob_session(trio):
    """Headers and cookies of a browser session of bob, an operator of acme (he sees every caller's tasks)."""
    browser = Client()
    browser.force_login(trio.users["bob"])
    csrf = "c" * 32
    yield (
        browser,
        {
            "headers": {"A2A-Version": "1.0", "X-CSRFToken": csrf},
            "cookies": {"sessionid": browser.cookies["sessionid"].value, "csrftoken": csrf},
        },
    )
    browser.logout()


def _token(trio) -> str:
    return trio.client_credentials_token(trio.clients["acme"]).json()["access_token"]


def _headers(trio, token: str) -> dict:
    return {"A2A-Version": "1.0", **trio.auth(token)}


def _url(trio, agent: str) -> str:
    return f"{trio.base_url}/a2a/acme/{agent}/"


def _rpc(url: str, method: str, params: dict, **request) -> dict:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    return httpx.post(url, json=body, timeout=30, **request).json()


def _asked(url: str, **request) -> str:
    """A new task that waits for input; its id."""
    task = _rpc(url, "SendMessage", new_message("colour?"), **request)["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task
    return task["id"]


def _answer(url: str, task_id: str, **request) -> None:
    """The task's next turn, sent by a caller who may: it completes with ANSWER."""
    answer = _rpc(url, "SendMessage", new_message(ANSWER, taskId=task_id), **request)
    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answer


def _revoke(trio, token: str) -> None:
    client = trio.clients["acme"]
    revoked = httpx.post(
        f"{trio.base_url}/o/revoke_token/", data={"token": token}, auth=(client.client_id, client.secret)
    )
    assert revoked.status_code == 200


def _subscribe(trio, binding: str, task_id: str, token: str):
    if binding == "rest":
        url = f"{_url(trio, 'asker')}rest/tasks/{task_id}:subscribe"
        return httpx.stream("GET", url, headers=_headers(trio, token), timeout=30)
    # A2A 1.0's method, or 0.3's (sent without an A2A-Version header).
    method, headers = "SubscribeToTask", _headers(trio, token)
    if binding == "v03":
        method, headers = "tasks/resubscribe", trio.auth(token)
    body = {"jsonrpc": "2.0", "id": "sub", "method": method, "params": {"id": task_id}}
    return httpx.stream("POST", _url(trio, "asker"), json=body, headers=headers, timeout=30)


def _frames(stream, within: float = 30.0):
    """The stream's data frames; the test fails if the stream is still open after `within` seconds."""
    ends = time.monotonic() + within
    for line in stream.iter_lines():
        if time.monotonic() > ends:
            pytest.fail(f"the stream was still open after {within:g} s")
        if line.startswith("data: "):
            yield json.loads(line[len("data: ") :])


@pytest.mark.parametrize("binding", ["jsonrpc", "rest", "v03"])
def test_a_stream_whose_token_is_revoked_ends_before_the_tasks_next_events(trio, asker, binding):
    token = _token(trio)
    task_id = _asked(_url(trio, asker), headers=_headers(trio, token))
    with _subscribe(trio, binding, task_id, token) as stream:
        assert stream.status_code == 200
        frames = _frames(stream)
        assert task_id in json.dumps(next(frames))
        _revoke(trio, token)
        # The stream's caller was checked when it opened: the next check is due after the interval.
        time.sleep(STREAM_RECHECK * 2)
        _answer(_url(trio, asker), task_id, headers=_headers(trio, _token(trio)))
        rest = list(frames)
    # The old code went on: the answer's artifact and the completion came down the revoked stream.
    assert ANSWER not in json.dumps(rest)
    assert len(rest) == 1, rest
    if binding == "rest":
        assert rest[0]["error"]["code"] == 401
        assert rest[0]["error"]["status"] == "UNAUTHENTICATED"
    else:
        assert rest[0]["id"] == "sub" and "result" not in rest[0]
        assert rest[0]["error"]["code"] == -32600
    assert rest[0]["error"]["message"] == TOKEN_GONE


def test_a_grpc_stream_whose_token_is_revoked_ends_unauthenticated(trio, asker, server):
    token = _token(trio)
    task_id = _asked(_url(trio, asker), headers=_headers(trio, token))
    metadata = (("authorization", f"Bearer {token}"), ("a2a-version", "1.0"))
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        request = pb.SubscribeToTaskRequest(tenant="acme/asker", id=task_id)
        stream = stub.SubscribeToTask(request, metadata=metadata, timeout=30)
        assert next(stream).task.id == task_id
        _revoke(trio, token)
        time.sleep(STREAM_RECHECK * 2)
        _answer(_url(trio, asker), task_id, headers=_headers(trio, _token(trio)))
        received = []
        with pytest.raises(grpc.RpcError) as ended:
            for event in stream:
                received.append(event)
    assert ended.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert ended.value.details() == TOKEN_GONE
    assert ANSWER not in str(received)


def test_a_stream_of_a_browser_session_ends_when_the_session_signs_out(trio, asker, bob_session):
    browser, session = bob_session
    token = _token(trio)
    task_id = _asked(_url(trio, asker), headers=_headers(trio, token))
    # bob follows the client's task from his browser session.
    body = {"jsonrpc": "2.0", "id": "sub", "method": "SubscribeToTask", "params": {"id": task_id}}
    with httpx.stream("POST", _url(trio, asker), json=body, timeout=30, **session) as stream:
        assert stream.status_code == 200
        frames = _frames(stream)
        assert next(frames)["result"]["task"]["id"] == task_id
        browser.logout()
        time.sleep(STREAM_RECHECK * 2)
        _answer(_url(trio, asker), task_id, headers=_headers(trio, token))
        rest = list(frames)
    assert ANSWER not in json.dumps(rest)
    assert [frame["error"]["code"] for frame in rest] == [-32600], rest
    assert rest[0]["error"]["message"] == "The session is over, or no longer has this agent's tenant"


def test_an_anonymous_stream_ends_when_its_agent_stops_being_public(trio, bob_session):
    _browser, session = bob_session
    agent, _ = Agent.objects.update_or_create(
        tenant=trio.tenants["acme"],
        slug="open-asker",
        defaults={"name": "Open asker", "handler": "push-ask", "visibility": Agent.Visibility.PUBLIC},
    )
    url, anonymous = _url(trio, "open-asker"), {"A2A-Version": "1.0"}
    try:
        task_id = _asked(url, headers=anonymous)
        body = {"jsonrpc": "2.0", "id": "sub", "method": "SubscribeToTask", "params": {"id": task_id}}
        with httpx.stream("POST", url, json=body, headers=anonymous, timeout=30) as stream:
            frames = _frames(stream)
            assert next(frames)["result"]["task"]["id"] == task_id
            Agent.objects.filter(pk=agent.pk).update(visibility=Agent.Visibility.AUTHENTICATED)
            time.sleep(STREAM_RECHECK * 2)
            # bob, an operator, answers the anonymous caller's question from his browser session.
            _answer(url, task_id, **session)
            rest = list(frames)
    finally:
        agent.delete()
    assert ANSWER not in json.dumps(rest)
    assert [frame["error"]["code"] for frame in rest] == [-32600], rest
    assert rest[0]["error"]["message"].startswith("Authentication required")


def test_a_stream_ends_when_its_agent_is_disabled(trio, asker):
    token = _token(trio)
    task_id = _asked(_url(trio, asker), headers=_headers(trio, token))
    try:
        with _subscribe(trio, "jsonrpc", task_id, token) as stream:
            # The old code kept it open while the task waited (a heartbeat every 15 s, for ever).
            frames = _frames(stream, within=12)
            assert next(frames)["result"]["task"]["id"] == task_id
            Agent.objects.filter(tenant=trio.tenants["acme"], slug=asker).update(enabled=False)
            rest = list(frames)
        assert rest == []
        # A reconnect hears why.
        again = _rpc(_url(trio, asker), "SubscribeToTask", {"id": task_id}, headers=_headers(trio, token))
        assert again["error"]["message"] == "No agent at this URL"
    finally:
        Agent.objects.filter(tenant=trio.tenants["acme"], slug=asker).update(enabled=True)
