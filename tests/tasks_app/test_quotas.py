"""Tenant quotas over real HTTP: requests per minute per caller, running turns, on every binding.

Each test makes a tenant of its own, so its counters and limits touch nobody else.
"""

import os
import secrets
import time
import uuid
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone
from oauth2_provider.models import AccessToken, set_token_value

from agents.models import Agent
from tasks_app.access import Caller
from tasks_app.models import Task
from tasks_app.quotas import WINDOW_SECONDS, QuotaExceeded, quota_turns_early
from tenants.models import Application, Tenant
from tenants.services import oauth_client_create
from tests.api.tenancy import new_message
from tests.live import start_web
from tests.sse import stream

SERVICES_MODE = bool(os.environ.get("REDIS_URL"))


def fresh_minute(margin: float = 4.0) -> None:
    """Wait for a new rate window if this one ends within `margin` seconds (the test would straddle it)."""
    left = WINDOW_SECONDS - time.time() % WINDOW_SECONDS
    if left < margin:
        time.sleep(left + 0.1)


def make_tenant(slow_seconds: float = 3, **limits) -> Tenant:
    """A tenant of its own with these limits, and agents: open, locked (echo), slow (sleeper)."""
    tenant = Tenant.objects.create(slug=f"quota-{uuid.uuid4().hex[:8]}", name="Quota test", **limits)
    Agent.objects.create(tenant=tenant, slug="open", name="Open", handler="echo", visibility="public")
    Agent.objects.create(
        tenant=tenant, slug="locked", name="Locked", handler="echo", visibility="authenticated"
    )
    Agent.objects.create(
        tenant=tenant,
        slug="slow",
        name="Slow",
        handler="sleeper",
        visibility="public",
        config={"seconds": slow_seconds},
    )
    return tenant


def client_token(tenant: Tenant, name: str) -> str:
    client, _ = oauth_client_create(
        tenant=tenant, actor="system:test", name=name, scopes=["a2a:invoke", "a2a:read"]
    )
    raw = secrets.token_urlsafe(24)
    token = AccessToken(
        application=Application.objects.get(pk=client.pk),
        scope="a2a:invoke a2a:read",
        expires=timezone.now() + timedelta(hours=1),
    )
    set_token_value(token, raw)
    token.save()
    return raw


def url(base: str, tenant: Tenant, agent: str, rest: str = "") -> str:
    return f"{base}/a2a/{tenant.slug}/{agent}/" + (f"rest/{rest}" if rest else "")


def rpc(base, tenant, agent, method, params, headers=None, version="1.0") -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": "q-1", "method": method, "params": params}
    sent = {**({"A2A-Version": version} if version else {}), **(headers or {})}
    return httpx.post(url(base, tenant, agent), json=body, headers=sent, timeout=30)


def rest_send(base, tenant, agent, headers=None, **configuration) -> httpx.Response:
    body = new_message("hi")
    if configuration:
        body["configuration"] = configuration
    sent = {"A2A-Version": "1.0", **(headers or {})}
    return httpx.post(url(base, tenant, agent, "message:send"), json=body, headers=sent, timeout=30)


def assert_retry_after(response: httpx.Response, at_most: int = WINDOW_SECONDS) -> int:
    assert response.status_code == 429, response.text
    retry_after = int(response.headers["Retry-After"])
    assert 1 <= retry_after <= at_most
    return retry_after


def test_rest_refuses_a_send_over_the_rate_with_429_and_retry_after(server, stored):
    tenant = make_tenant(rate_limit_per_minute=3)
    fresh_minute()
    for _ in range(3):
        assert rest_send(server.base_url, tenant, "open").status_code == 200
    refused = rest_send(server.base_url, tenant, "open")
    retry_after = assert_retry_after(refused)
    error = refused.json()["error"]
    assert error["status"] == "RESOURCE_EXHAUSTED"
    assert "at most 3 requests per minute" in error["message"]
    info, retry = error["details"]
    assert info["reason"] == "RATE_LIMIT_EXCEEDED" and info["metadata"]["limit"] == "3"
    assert retry == {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{retry_after}s"}
    # Refused before anything was stored.
    assert Task.objects.filter(tenant=tenant).count() == 3


def test_jsonrpc_refusal_is_http_429_with_the_retry_time_in_the_error_data(server, stored):
    tenant = make_tenant(rate_limit_per_minute=2)
    fresh_minute()
    # Reads count too: a GetTask and a ListTasks use up the minute.
    assert "error" in rpc(server.base_url, tenant, "open", "GetTask", {"id": str(uuid.uuid4())}).json()
    assert "result" in rpc(server.base_url, tenant, "open", "ListTasks", {}).json()
    refused = rpc(server.base_url, tenant, "open", "SendMessage", new_message("hi"))
    retry_after = assert_retry_after(refused)
    error = refused.json()["error"]
    assert error["code"] == -32029
    assert error["data"] == {"retryAfter": retry_after, "reason": "RATE_LIMIT_EXCEEDED", "limit": 2}
    assert Task.objects.filter(tenant=tenant).count() == 0


def test_a_stream_over_the_rate_is_refused_before_it_starts(server, stored):
    tenant = make_tenant(rate_limit_per_minute=1)
    fresh_minute()
    body = {"jsonrpc": "2.0", "id": "s-1", "method": "SendStreamingMessage", "params": new_message("hi")}
    with stream(url(server.base_url, tenant, "open"), body) as first:
        assert first.headers["content-type"].startswith("text/event-stream")
        first.read()
    with stream(url(server.base_url, tenant, "open"), body | {"params": new_message("again")}) as refused:
        refused.read()
        assert_retry_after(refused)
        assert refused.headers["content-type"].startswith("application/json")
        assert refused.json()["error"]["code"] == -32029
    with stream(url(server.base_url, tenant, "open", "message:stream"), new_message("rest")) as refused:
        refused.read()
        assert_retry_after(refused)
        assert refused.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
    assert Task.objects.filter(tenant=tenant).count() == 1


def test_the_older_dialects_are_refused_alike(server, stored):
    tenant = make_tenant(rate_limit_per_minute=1)
    fresh_minute()
    v03 = {
        "message": {
            "kind": "message",
            "role": "user",
            "messageId": str(uuid.uuid4()),
            "parts": [{"kind": "text", "text": "hi"}],
        }
    }
    assert "result" in rpc(server.base_url, tenant, "open", "message/send", v03, version=None).json()
    refused = rpc(
        server.base_url,
        tenant,
        "open",
        "message/send",
        v03 | {"message": v03["message"] | {"messageId": "m2"}},
        version=None,
    )
    assert_retry_after(refused)
    assert refused.json()["error"]["code"] == -32029
    draft = {"id": "draft-task", "message": {"role": "user", "parts": [{"type": "text", "text": "hi"}]}}
    refused = rpc(server.base_url, tenant, "open", "tasks/send", draft, version=None)
    assert_retry_after(refused)
    assert refused.json()["error"]["data"]["reason"] == "RATE_LIMIT_EXCEEDED"
    assert Task.objects.filter(tenant=tenant).count() == 1


def test_each_oauth_client_has_its_own_rate(server, stored):
    tenant = make_tenant(rate_limit_per_minute=2)
    first, second = client_token(tenant, "first"), client_token(tenant, "second")
    fresh_minute()
    for _ in range(2):
        assert (
            rest_send(server.base_url, tenant, "locked", {"Authorization": f"Bearer {first}"}).status_code
            == 200
        )
    assert_retry_after(rest_send(server.base_url, tenant, "locked", {"Authorization": f"Bearer {first}"}))
    # The other client, and an anonymous caller of a public agent, still have their minute.
    assert (
        rest_send(server.base_url, tenant, "locked", {"Authorization": f"Bearer {second}"}).status_code == 200
    )
    assert rest_send(server.base_url, tenant, "open").status_code == 200


def test_a_tenant_without_limits_is_not_limited(server, stored):
    tenant = make_tenant()
    for _ in range(5):
        assert rest_send(server.base_url, tenant, "open").status_code == 200


def test_sends_over_the_running_turns_limit_wait_until_a_turn_ends(server, stored):
    tenant = make_tenant(max_running_turns=2)
    accepted = [rest_send(server.base_url, tenant, "slow", returnImmediately=True) for _ in range(2)]
    assert [answer.status_code for answer in accepted] == [200, 200]
    refused = rest_send(server.base_url, tenant, "slow", returnImmediately=True)
    assert_retry_after(refused, at_most=5)
    assert refused.json()["error"]["details"][0]["reason"] == "RUNNING_TURNS_EXCEEDED"
    refused = rpc(server.base_url, tenant, "slow", "SendMessage", new_message("hi"))
    assert refused.status_code == 429
    assert refused.json()["error"]["data"]["reason"] == "RUNNING_TURNS_EXCEEDED"
    # Reads are not turns.
    task_id = accepted[0].json()["task"]["id"]
    assert "result" in rpc(server.base_url, tenant, "slow", "GetTask", {"id": task_id}).json()
    assert Task.objects.filter(tenant=tenant).count() == 2
    # The sleeper finishes after 3 s: its slots are free again.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        answer = rest_send(server.base_url, tenant, "slow", returnImmediately=True)
        if answer.status_code == 200:
            break
        assert answer.status_code == 429
        time.sleep(0.5)
    assert answer.status_code == 200
    assert Task.objects.filter(tenant=tenant).count() == 3


def test_a_repeated_send_of_a_full_tenant_is_answered_with_the_task_it_stored(server, stored):
    # The caller's answer was lost; it sends again with the same Idempotency-Key. Its own turn
    # fills the tenant, but the send was stored: it gets that task, not "too many running turns".
    tenant = make_tenant(max_running_turns=1)
    key = {"Idempotency-Key": f"quota-{uuid.uuid4()}"}
    body = new_message("hi")
    first = httpx.post(
        url(server.base_url, tenant, "slow", "message:send"),
        json=body | {"configuration": {"returnImmediately": True}},
        headers={"A2A-Version": "1.0", **key},
        timeout=30,
    )
    assert first.status_code == 200, first.text
    task_id = first.json()["task"]["id"]
    for send in (
        lambda: httpx.post(
            url(server.base_url, tenant, "slow", "message:send"),
            json=body | {"configuration": {"returnImmediately": True}},
            headers={"A2A-Version": "1.0", **key},
            timeout=30,
        ),
        lambda: rpc(
            server.base_url,
            tenant,
            "slow",
            "SendMessage",
            body | {"configuration": {"returnImmediately": True}},
            headers=key,
        ),
    ):
        again = send()
        assert again.status_code == 200, again.text
        answer = again.json()
        assert answer.get("result", answer)["task"]["id"] == task_id
    # A new send is still refused, with or without a key of its own.
    assert_retry_after(rest_send(server.base_url, tenant, "slow", returnImmediately=True), at_most=5)
    other_key = {"Idempotency-Key": f"quota-{uuid.uuid4()}"}
    refused = rest_send(server.base_url, tenant, "slow", other_key, returnImmediately=True)
    assert_retry_after(refused, at_most=5)
    assert refused.json()["error"]["details"][0]["reason"] == "RUNNING_TURNS_EXCEEDED"
    assert Task.objects.filter(tenant=tenant).count() == 1


def test_the_early_look_lets_through_only_a_keyed_send_whose_key_is_stored(server, stored):
    # A new key at a full tenant is refused before the send opens a transaction (where it would
    # queue on the tenant's row with a database thread held); only a stored key goes on.
    tenant = make_tenant(max_running_turns=1)
    key = f"early-{uuid.uuid4()}"
    first = rest_send(server.base_url, tenant, "slow", {"Idempotency-Key": key}, returnImmediately=True)
    assert first.status_code == 200, first.text
    caller = Caller(tenant=tenant, agent=Agent.objects.get(tenant=tenant, slug="slow"))
    quota_turns_early(caller, key)  # its task is answered again
    with pytest.raises(QuotaExceeded) as refused:
        quota_turns_early(caller, f"early-{uuid.uuid4()}")
    assert refused.value.reason == QuotaExceeded.RUNNING_TURNS
    with pytest.raises(QuotaExceeded):
        quota_turns_early(caller)
    # The same key from another caller is not that caller's stored send.
    other = Caller(tenant=tenant, agent=caller.agent, principal="client:someone-else")
    with pytest.raises(QuotaExceeded):
        quota_turns_early(other, key)


def test_a_full_tenant_answers_a_send_that_could_never_be_stored_with_its_own_error(server, stored):
    # "Too many running turns, retry later" (429) told a client to retry what no retry can store.
    tenant = make_tenant(slow_seconds=10, max_running_turns=1)
    done = rpc(server.base_url, tenant, "open", "SendMessage", new_message("done")).json()["result"]["task"]
    assert rest_send(server.base_url, tenant, "slow", returnImmediately=True).status_code == 200  # full now

    follow_up = new_message("more")
    follow_up["message"]["taskId"] = done["id"]
    answer = rpc(server.base_url, tenant, "open", "SendMessage", follow_up)
    assert answer.json()["error"]["code"] == -32004, answer.text  # UnsupportedOperation: it is completed
    unknown = new_message("more")
    unknown["message"]["taskId"] = str(uuid.uuid4())
    answer = rpc(server.base_url, tenant, "open", "SendMessage", unknown)
    assert answer.json()["error"]["code"] == -32001, answer.text  # TaskNotFound
    from_agent = new_message("hi")
    from_agent["message"]["role"] = "ROLE_AGENT"
    answer = rpc(server.base_url, tenant, "open", "SendMessage", from_agent)
    assert answer.json()["error"]["code"] == -32602, answer.text
    # A good new send is still refused.
    refused = rpc(server.base_url, tenant, "open", "SendMessage", new_message("new"))
    assert refused.status_code == 429
    assert refused.json()["error"]["data"]["reason"] == "RUNNING_TURNS_EXCEEDED"


@pytest.mark.skipif(not SERVICES_MODE, reason="the embedded default is one process")
def test_the_rate_holds_across_web_processes(server, stored, db_settings, log_dir):
    tenant = make_tenant(rate_limit_per_minute=4)
    other = start_web(db_settings, log_dir, name="web-quota")
    try:
        fresh_minute(margin=6.0)
        for base in (server.base_url, other.base_url, server.base_url, other.base_url):
            assert rest_send(base, tenant, "open").status_code == 200
        assert_retry_after(rest_send(other.base_url, tenant, "open"))
        assert_retry_after(rest_send(server.base_url, tenant, "open"))
    finally:
        other.stop()
    assert Task.objects.filter(tenant=tenant).count() == 4
