"""Tenant isolation on every A2A 1.0 method, on the JSON-RPC and the HTTP+JSON bindings.

globex's token, at globex's own endpoint, asking about acme's task, context or
push config gets exactly the answer a made-up id gets. globex's token at
acme's endpoint is just an invalid token there. Nothing of acme's is listed.
"""

import json
import uuid

import httpx
import pytest

from tests.api import tenancy
from tests.api.tenancy import new_message

# The fixture, shared with tests/api.
trio = tenancy.trio

HOOK = "http://127.0.0.1:9/hook"


def jsonrpc(trio, tenant: str, agent: str, method: str, params: dict, token: str | None) -> httpx.Response:
    headers = {"A2A-Version": "1.0", **(trio.auth(token) if token else {})}
    body = {"jsonrpc": "2.0", "id": "req-1", "method": method, "params": params}
    return httpx.post(f"{trio.base_url}/a2a/{tenant}/{agent}/", json=body, headers=headers, timeout=30)


def rest(trio, tenant: str, agent: str, verb: str, path: str, token: str | None, body=None) -> httpx.Response:
    headers = {"A2A-Version": "1.0", **(trio.auth(token) if token else {})}
    url = f"{trio.base_url}/a2a/{tenant}/{agent}/rest/{path}"
    return httpx.request(verb, url, json=body, headers=headers, timeout=30)


@pytest.fixture(scope="module")
def acme(trio):
    """acme's objects: a finished task, a waiting task with a push config, made by acme's client."""
    token = trio.token("acme")
    done = jsonrpc(trio, "acme", "vault", "SendMessage", new_message("secret plans"), token).json()
    waiting = jsonrpc(
        trio,
        "acme",
        "quiet",
        "SendMessage",
        {**new_message("wait"), "configuration": {"returnImmediately": True}},
        token,
    ).json()
    task = waiting["result"]["task"]
    config = jsonrpc(
        trio, "acme", "quiet", "CreateTaskPushNotificationConfig", {"taskId": task["id"], "url": HOOK}, token
    ).json()
    return {
        "token": token,
        "done": done["result"]["task"],
        "waiting": task,
        "config_id": config["result"]["id"],
    }


# (method, params for a task id and a config id). Streaming methods fail before the first event.
JSONRPC_CASES = [
    ("SendMessage", lambda t, c: new_message("more", taskId=t)),
    ("SendStreamingMessage", lambda t, c: new_message("more", taskId=t)),
    ("GetTask", lambda t, c: {"id": t}),
    ("CancelTask", lambda t, c: {"id": t}),
    ("SubscribeToTask", lambda t, c: {"id": t}),
    ("CreateTaskPushNotificationConfig", lambda t, c: {"taskId": t, "url": HOOK}),
    ("GetTaskPushNotificationConfig", lambda t, c: {"taskId": t, "id": c}),
    ("ListTaskPushNotificationConfigs", lambda t, c: {"taskId": t}),
    ("DeleteTaskPushNotificationConfig", lambda t, c: {"taskId": t, "id": c}),
]

REST_CASES = [
    ("SendMessage", "POST", lambda t, c: "message:send", lambda t: new_message("more", taskId=t)),
    ("SendStreamingMessage", "POST", lambda t, c: "message:stream", lambda t: new_message("more", taskId=t)),
    ("GetTask", "GET", lambda t, c: f"tasks/{t}", None),
    ("CancelTask", "POST", lambda t, c: f"tasks/{t}:cancel", None),
    ("SubscribeToTask", "POST", lambda t, c: f"tasks/{t}:subscribe", None),
    ("SubscribeToTask (GET)", "GET", lambda t, c: f"tasks/{t}:subscribe", None),
    ("CreatePushConfig", "POST", lambda t, c: f"tasks/{t}/pushNotificationConfigs", lambda t: {"url": HOOK}),
    ("GetPushConfig", "GET", lambda t, c: f"tasks/{t}/pushNotificationConfigs/{c}", None),
    ("ListPushConfigs", "GET", lambda t, c: f"tasks/{t}/pushNotificationConfigs", None),
    ("DeletePushConfig", "DELETE", lambda t, c: f"tasks/{t}/pushNotificationConfigs/{c}", None),
]


def _same_answer(first: httpx.Response, second: httpx.Response, first_ids, second_ids) -> None:
    def normalized(response, ids):
        text = response.text
        for index, value in enumerate(ids):
            text = text.replace(value, f"<id{index}>")
        return response.status_code, response.headers.get("content-type"), json.loads(text)

    assert normalized(first, first_ids) == normalized(second, second_ids)


@pytest.mark.parametrize("method,params", JSONRPC_CASES, ids=[c[0] for c in JSONRPC_CASES])
@pytest.mark.parametrize("which", ["done", "waiting"])
def test_jsonrpc_answers_another_tenants_task_like_a_missing_one(trio, acme, method, params, which):
    globex = trio.token("globex")
    task_id, config_id = acme[which]["id"], acme["config_id"]
    missing_task, missing_config = str(uuid.uuid4()), str(uuid.uuid4())
    theirs = jsonrpc(trio, "globex", "vault", method, params(task_id, config_id), globex)
    missing = jsonrpc(trio, "globex", "vault", method, params(missing_task, missing_config), globex)
    assert theirs.json()["error"]["code"] == -32001, theirs.text
    _same_answer(theirs, missing, [task_id, config_id], [missing_task, missing_config])


@pytest.mark.parametrize("name,verb,path,body", REST_CASES, ids=[c[0] for c in REST_CASES])
@pytest.mark.parametrize("which", ["done", "waiting"])
def test_rest_answers_another_tenants_task_like_a_missing_one(trio, acme, name, verb, path, body, which):
    globex = trio.token("globex")
    task_id, config_id = acme[which]["id"], acme["config_id"]
    missing_task, missing_config = str(uuid.uuid4()), str(uuid.uuid4())
    theirs = rest(trio, "globex", "vault", verb, path(task_id, config_id), globex, body and body(task_id))
    missing = rest(
        trio, "globex", "vault", verb, path(missing_task, missing_config), globex, body and body(missing_task)
    )
    assert theirs.status_code == 404, theirs.text
    assert theirs.json()["error"]["details"][0]["reason"] == "TASK_NOT_FOUND"
    _same_answer(theirs, missing, [task_id, config_id], [missing_task, missing_config])


@pytest.mark.parametrize("method,params", JSONRPC_CASES, ids=[c[0] for c in JSONRPC_CASES])
def test_another_client_of_the_same_tenant_cannot_reach_the_task(trio, acme, method, params):
    # Caller scoping inside a tenant: a task belongs to the client that created it.
    second = trio.token("acme")  # a fresh token of the same client still sees it...
    assert jsonrpc(trio, "acme", "vault", "GetTask", {"id": acme["done"]["id"]}, second).json().get("result")
    other_client = _other_client_token(trio)
    task_id, config_id = acme["waiting"]["id"], acme["config_id"]
    missing_task = str(uuid.uuid4())
    theirs = jsonrpc(trio, "acme", "quiet", method, params(task_id, config_id), other_client)
    missing = jsonrpc(trio, "acme", "quiet", method, params(missing_task, config_id), other_client)
    assert theirs.json()["error"]["code"] == -32001, theirs.text
    _same_answer(theirs, missing, [task_id], [missing_task])


def _other_client_token(trio) -> str:
    answer = trio.client_credentials_token(trio.clients["acme-second"]).json()
    return answer["access_token"]


def test_list_tasks_shows_nothing_of_another_tenant_or_client(trio, acme):
    acme_ids = {acme["done"]["id"], acme["waiting"]["id"]}
    globex = trio.token("globex")
    jsonrpc(trio, "globex", "vault", "SendMessage", new_message("globex work"), globex)
    listed = jsonrpc(trio, "globex", "vault", "ListTasks", {}, globex).json()["result"]
    assert listed["tasks"], "globex sees its own task"
    assert not acme_ids & {task["id"] for task in listed["tasks"]}
    listed_rest = rest(trio, "globex", "vault", "GET", "tasks", globex).json()
    assert not acme_ids & {task["id"] for task in listed_rest["tasks"]}
    other = _other_client_token(trio)
    for agent in ("vault", "quiet"):
        mine = jsonrpc(trio, "acme", agent, "ListTasks", {}, other).json()["result"]
        assert not acme_ids & {task["id"] for task in mine["tasks"]}
    owners = jsonrpc(trio, "acme", "vault", "ListTasks", {}, acme["token"]).json()["result"]
    assert acme["done"]["id"] in {task["id"] for task in owners["tasks"]}


def test_another_tenants_token_is_an_invalid_token_at_acmes_endpoint(trio, acme):
    globex = trio.token("globex")
    params = {"id": acme["done"]["id"]}
    theirs = jsonrpc(trio, "acme", "vault", "GetTask", params, globex)
    garbage = jsonrpc(trio, "acme", "vault", "GetTask", params, "not-a-token")
    assert theirs.status_code == 401
    assert theirs.headers["WWW-Authenticate"] == garbage.headers["WWW-Authenticate"]
    assert theirs.json() == garbage.json()
    # Public agents too: a presented token is judged, never ignored.
    assert jsonrpc(trio, "acme", "lobby", "ListTasks", {}, globex).status_code == 401
    theirs_rest = rest(trio, "acme", "vault", "GET", f"tasks/{acme['done']['id']}", globex)
    garbage_rest = rest(trio, "acme", "vault", "GET", f"tasks/{acme['done']['id']}", "not-a-token")
    assert theirs_rest.status_code == garbage_rest.status_code == 401
    assert theirs_rest.json() == garbage_rest.json()


def test_tenant_field_of_another_tenant_is_refused(trio, acme):
    token = trio.token("acme")
    answer = jsonrpc(trio, "acme", "vault", "GetTask", {"id": acme["done"]["id"], "tenant": "globex"}, token)
    assert answer.json()["error"]["code"] == -32602
    assert "tenant" in answer.json()["error"]["message"]
    prefixed = rest(trio, "acme", "vault", "GET", f"globex/tasks/{acme['done']['id']}", token)
    assert prefixed.status_code == 400
    ok = rest(trio, "acme", "vault", "GET", f"acme/tasks/{acme['done']['id']}", token)
    assert ok.status_code == 200 and ok.json()["id"] == acme["done"]["id"]


def test_operator_session_sees_every_callers_task_and_outsider_session_sees_nothing(trio, acme):
    from django.test import Client

    def session_cookie(username: str) -> dict:
        browser = Client()
        browser.force_login(trio.users[username])
        return {"sessionid": browser.cookies["sessionid"].value}

    url = f"{trio.base_url}/a2a/acme/vault/rest/tasks/{acme['done']['id']}"
    headers = {"A2A-Version": "1.0"}
    bob = httpx.get(url, headers=headers, cookies=session_cookie("bob"), timeout=30)
    assert bob.status_code == 200 and bob.json()["id"] == acme["done"]["id"]
    charlie = httpx.get(url, headers=headers, cookies=session_cookie("charlie"), timeout=30)
    assert charlie.status_code == 401
    # A session without a CSRF token cannot post: another site could otherwise act with the cookie.
    body = {"jsonrpc": "2.0", "id": 1, "method": "CancelTask", "params": {"id": acme["waiting"]["id"]}}
    posted = httpx.post(
        f"{trio.base_url}/a2a/acme/quiet/",
        json=body,
        headers=headers,
        cookies=session_cookie("bob"),
        timeout=30,
    )
    assert posted.status_code == 401
