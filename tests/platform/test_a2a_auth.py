"""OAuth2 on the A2A endpoints: tokens, scopes, expiry, revocation, the flows, and the SDK client."""

import base64
import hashlib
import secrets
import uuid
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.helpers import new_text_message
from a2a.types import GetTaskRequest, Role, SendMessageRequest, TaskState

from tests.api import tenancy
from tests.api.tenancy import new_message
from tests.platform.test_a2a_isolation import jsonrpc, rest

# The fixture, shared with tests/api.
trio = tenancy.trio

METHOD_SCOPES = [
    ("SendMessage", "a2a:invoke", lambda: new_message("hi")),
    ("CancelTask", "a2a:invoke", lambda: {"id": "00000000-0000-0000-0000-000000000000"}),
    ("GetTask", "a2a:read", lambda: {"id": "00000000-0000-0000-0000-000000000000"}),
    ("ListTasks", "a2a:read", dict),
    ("SubscribeToTask", "a2a:read", lambda: {"id": "00000000-0000-0000-0000-000000000000"}),
    (
        "ListTaskPushNotificationConfigs",
        "a2a:push",
        lambda: {"taskId": "00000000-0000-0000-0000-000000000000"},
    ),
]


@pytest.mark.parametrize("method,scope,params", METHOD_SCOPES, ids=[m[0] for m in METHOD_SCOPES])
def test_a_token_without_the_methods_scope_is_refused_with_403(trio, method, scope, params):
    others = [s for s in ("a2a:invoke", "a2a:read", "a2a:push", "agents:manage") if s != scope]
    answer = jsonrpc(trio, "acme", "vault", method, params(), trio.token("acme", others))
    assert answer.status_code == 403
    assert 'error="insufficient_scope"' in answer.headers["WWW-Authenticate"]
    assert scope in answer.json()["error"]["message"]


def test_rest_refuses_wrong_scope_with_403(trio):
    answer = rest(trio, "acme", "vault", "GET", "tasks", trio.token("acme", ["a2a:invoke"]))
    assert answer.status_code == 403
    assert answer.json()["error"]["status"] == "PERMISSION_DENIED"


@pytest.mark.parametrize("binding", ["jsonrpc", "rest"])
def test_no_token_on_an_authenticated_agent_gets_401_with_a_challenge(trio, binding):
    if binding == "jsonrpc":
        answer = jsonrpc(trio, "acme", "vault", "SendMessage", new_message(), None)
        assert answer.json()["error"]["message"].startswith("Authentication required")
    else:
        answer = rest(trio, "acme", "vault", "POST", "message:send", None, new_message())
        assert answer.json()["error"]["status"] == "UNAUTHENTICATED"
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"].startswith('Bearer realm="a2a/acme/vault"')


@pytest.mark.parametrize("method", ["SendMessage", "SendStreamingMessage"])
def test_the_caller_is_refused_before_the_values_of_its_request_are_judged(trio, method):
    params = {**new_message(), "configuration": {"historyLength": -1}}
    answer = jsonrpc(trio, "acme", "vault", method, params, None)
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"].startswith('Bearer realm="a2a/acme/vault"')
    # With a token, the same request gets its own error.
    answer = jsonrpc(trio, "acme", "vault", "SendMessage", params, trio.token("acme"))
    assert answer.json()["error"]["code"] == -32602


@pytest.mark.parametrize("query", ["x=[", "x=%zz", "A2A-Version=1.0&y=]"])
def test_a_token_is_judged_whatever_the_query_of_the_url(trio, query):
    """oauthlib cannot read such a query (a ValueError): the token is checked against the endpoint."""
    url = f"{trio.base_url}/a2a/acme/vault/?{query}"
    body = {"jsonrpc": "2.0", "id": "req-1", "method": "SendMessage", "params": new_message("odd url")}
    for token, status in ((trio.token("acme"), 200), ("not-a-token", 401)):
        headers = {"A2A-Version": "1.0", **trio.auth(token)}
        answer = httpx.post(url, json=body, headers=headers, timeout=30)
        assert answer.status_code == status, answer.text
    assert "invalid" in answer.json()["error"]["message"]
    rest_answer = httpx.get(
        f"{trio.base_url}/a2a/acme/vault/rest/tasks?{query}",
        headers={"A2A-Version": "1.0", **trio.auth(trio.token("acme"))},
        timeout=30,
    )
    assert rest_answer.status_code == 200, rest_answer.text
    # The same characters escaped in the path are part of it, not a query: a missing task, not a 401.
    missing = httpx.get(
        f"{trio.base_url}/a2a/acme/vault/rest/tasks/x%3F%5B%25zz",
        headers={"A2A-Version": "1.0", **trio.auth(trio.token("acme"))},
        timeout=30,
    )
    assert missing.status_code == 404, missing.text


@pytest.mark.parametrize("method", ["SendMessage", "SendStreamingMessage"])
def test_the_caller_is_refused_before_its_idempotency_key_is_judged(trio, method):
    body = {"jsonrpc": "2.0", "id": "req-1", "method": method, "params": new_message()}
    sent = {"A2A-Version": "1.0", "Idempotency-Key": "a b"}
    answer = httpx.post(f"{trio.base_url}/a2a/acme/vault/", json=body, headers=sent, timeout=30)
    assert answer.status_code == 401, answer.text
    with_token = {**sent, **trio.auth(trio.token("acme"))}
    answer = httpx.post(f"{trio.base_url}/a2a/acme/vault/", json=body, headers=with_token, timeout=30)
    assert answer.status_code == 200 and answer.json()["error"]["code"] == -32602


def test_expired_token_is_refused_with_401(trio):
    expired = trio.token("acme", expires_in=-5)
    answer = jsonrpc(trio, "acme", "vault", "ListTasks", {}, expired)
    assert answer.status_code == 401
    assert 'error="invalid_token"' in answer.headers["WWW-Authenticate"]
    assert rest(trio, "acme", "vault", "GET", "tasks", expired).status_code == 401


def _unauthorized(trio, binding: str, headers: dict) -> httpx.Response:
    url = f"{trio.base_url}/a2a/acme/vault/"
    if binding == "rest":
        return httpx.get(url + "rest/tasks", headers={"A2A-Version": "1.0", **headers}, timeout=30)
    if binding == "jsonrpc":
        body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
        headers = {"A2A-Version": "1.0", **headers}
    else:  # 0.3: no A2A-Version
        body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "t-1"}}
    return httpx.post(url, json=body, headers=headers, timeout=30)


@pytest.mark.parametrize("binding", ["jsonrpc", "rest", "v0.3"])
def test_a_401_names_invalid_token_only_when_a_token_was_sent(trio, binding):
    """RFC 6750 §3.1: no credentials (or an unsupported scheme) get a challenge without an error code."""
    bare = 'Bearer realm="a2a/acme/vault"'
    for headers in ({}, {"Authorization": "Basic dXNlcjpwYXNz"}):
        answer = _unauthorized(trio, binding, headers)
        assert answer.status_code == 401
        assert answer.headers["WWW-Authenticate"] == bare, headers
    for token in ("not-a-token", trio.token("acme", expires_in=-5), trio.token("globex")):
        answer = _unauthorized(trio, binding, trio.auth(token))
        assert answer.status_code == 401
        assert answer.headers["WWW-Authenticate"] == bare + ', error="invalid_token"'


def test_token_revoked_at_the_revocation_endpoint_is_refused(trio):
    client = trio.clients["acme"]
    token = trio.client_credentials_token(client).json()["access_token"]
    assert jsonrpc(trio, "acme", "vault", "ListTasks", {}, token).status_code == 200
    revoked = httpx.post(
        f"{trio.base_url}/o/revoke_token/", data={"token": token}, auth=(client.client_id, client.secret)
    )
    assert revoked.status_code == 200
    assert jsonrpc(trio, "acme", "vault", "ListTasks", {}, token).status_code == 401


def test_client_credentials_token_gets_only_the_clients_allowed_scopes(trio, stored):
    from tenants.services import oauth_client_create

    app, secret = oauth_client_create(
        tenant=trio.tenants["acme"], actor="system:test", name="reader", scopes=["a2a:read"]
    )
    client = type(trio.clients["acme"])(app.client_id, secret)
    default = trio.client_credentials_token(client).json()
    assert default["scope"] == "a2a:read"
    refused = trio.client_credentials_token(client, scope="a2a:read agents:manage")
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_scope"
    reader = default["access_token"]
    assert jsonrpc(trio, "acme", "vault", "ListTasks", {}, reader).status_code == 200
    assert jsonrpc(trio, "acme", "vault", "SendMessage", new_message(), reader).status_code == 403


def test_wrong_client_secret_gets_no_token(trio):
    client = trio.clients["acme"]
    answer = trio.client_credentials_token(type(client)(client.client_id, "wrong"))
    assert answer.status_code == 401 and answer.json()["error"] == "invalid_client"


def _pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def _authorize(trio, username: str, client_id: str, challenge: str) -> httpx.Response:
    from django.test import Client

    from tenants.models import Application

    # The consent screen is DOT's; this client is trusted, so the code comes at once.
    Application.objects.filter(client_id=client_id).update(skip_authorization=True)
    browser = Client()
    browser.force_login(trio.users[username])
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": "http://127.0.0.1/cb",
        "scope": "a2a:invoke a2a:read",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": "xyz",
    }
    return httpx.get(
        f"{trio.base_url}/o/authorize/",
        params=query,
        cookies={"sessionid": browser.cookies["sessionid"].value},
        follow_redirects=False,
        timeout=30,
    )


def test_authorization_code_with_pkce_gives_a_member_a_token_that_acts_as_them(trio):
    client = trio.clients["acme-interactive"]
    verifier, challenge = _pkce()
    redirect = _authorize(trio, "bob", client.client_id, challenge)
    assert redirect.status_code == 302, redirect.text
    code = parse_qs(urlparse(redirect.headers["Location"]).query)["code"][0]
    token = httpx.post(
        f"{trio.base_url}/o/token/",
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": "http://127.0.0.1/cb",
            "client_id": client.client_id,
            "code_verifier": verifier,
        },
    ).json()
    assert token["scope"] == "a2a:invoke a2a:read"
    sent = jsonrpc(trio, "acme", "vault", "SendMessage", new_message("from bob"), token["access_token"])
    task = sent.json()["result"]["task"]
    from tasks_app.models import Task

    assert Task.objects.get(pk=task["id"]).owner == f"user:{trio.users['bob'].pk}"


def test_a_session_posting_a_form_body_django_cannot_read_is_not_a_500(trio):
    from django.test import Client

    browser = Client()
    browser.force_login(trio.users["bob"])
    token = "c" * 32
    answer = httpx.post(
        f"{trio.base_url}/a2a/acme/vault/rest/tasks/{uuid.uuid4()}:cancel",
        content=b"",
        # multipart with no boundary: Django's form parser refuses it when the CSRF check reads it.
        headers={"A2A-Version": "1.0", "Content-Type": "multipart/form-data", "X-CSRFToken": token},
        cookies={"sessionid": browser.cookies["sessionid"].value, "csrftoken": token},
        timeout=30,
    )
    # The session does not count (its token cannot be read): the agent asks for credentials.
    assert answer.status_code == 401, answer.text
    assert answer.json()["error"]["status"] == "UNAUTHENTICATED"


@pytest.mark.parametrize(
    "page", ["applications/", "applications/register/", "authorized_tokens/", "register/", "userinfo/"]
)
def test_oauth_toolkits_own_client_and_token_pages_are_not_served(trio, page):
    """Clients belong to a tenant: DOT's pages that list and register them (knowing none) are not there."""
    from django.test import Client

    browser = Client()
    browser.force_login(trio.users["dave"])
    answer = httpx.get(
        f"{trio.base_url}/o/{page}",
        cookies={"sessionid": browser.cookies["sessionid"].value},
        follow_redirects=False,
        timeout=30,
    )
    assert answer.status_code == 404, answer.text[:300]


def test_authorization_code_is_refused_to_someone_outside_the_tenant(trio):
    verifier, challenge = _pkce()
    redirect = _authorize(trio, "charlie", trio.clients["acme-interactive"].client_id, challenge)
    assert redirect.status_code == 302
    query = parse_qs(urlparse(redirect.headers["Location"]).query)
    assert query.get("error") == ["access_denied"] and "code" not in query


async def test_sdk_client_gets_a_token_by_client_credentials_and_calls_the_authenticated_agent(trio):
    client_creds = trio.clients["acme"]
    async with httpx.AsyncClient() as http:
        answer = await http.post(
            f"{trio.base_url}/o/token/",
            data={"grant_type": "client_credentials", "scope": "a2a:invoke a2a:read"},
            auth=(client_creds.client_id, client_creds.secret),
        )
    token = answer.json()["access_token"]
    headers = {"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        card = (await http.get(f"{trio.base_url}/a2a/acme/vault/.well-known/agent-card.json")).json()
        flow = card["securitySchemes"]["oauth2"]["oauth2SecurityScheme"]["flows"]["clientCredentials"]
        assert flow["tokenUrl"] == f"{trio.base_url}/o/token/"
        client = await create_client(
            f"{trio.base_url}/a2a/acme/vault/", client_config=ClientConfig(streaming=True, httpx_client=http)
        )
        request = SendMessageRequest(message=new_text_message("sdk hello", role=Role.ROLE_USER))
        events = [event async for event in client.send_message(request)]
        task_id = events[0].task.id
        assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
        fetched = await client.get_task(GetTaskRequest(id=task_id))
        assert "sdk hello" in fetched.artifacts[0].parts[0].text
    async with httpx.AsyncClient(headers={"A2A-Version": "1.0"}, timeout=30) as anonymous:
        refused = await anonymous.post(
            f"{trio.base_url}/a2a/acme/vault/",
            json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}},
        )
    assert refused.status_code == 401


def test_extended_card_is_served_to_an_authenticated_caller_only(trio):
    extended = jsonrpc(trio, "acme", "vault", "GetExtendedAgentCard", {}, trio.token("acme"))
    assert extended.status_code == 200 and extended.json()["result"]["name"] == "Vault"
    assert jsonrpc(trio, "acme", "vault", "GetExtendedAgentCard", {}, None).status_code == 401
    assert rest(trio, "acme", "vault", "GET", "extendedAgentCard", None).status_code == 401
