"""Who may let an auth-required task go on: a principal other than the requester with the right.

The platform decides who approved (agents/approvals.py); the built-in `approval`
agent acts on its record only. Operators and owners decide through the
management API (and the console, tests/console/test_operator_queues.py); a
client decides over A2A when its token has the a2a:approve scope.
"""

import time
import uuid

import httpx
import pytest

from tests.api import tenancy
from tests.api.tenancy import new_message

trio = tenancy.trio
REQUEST = "Wire $1,000,000 to account 12-3456"


def a2a(trio, token: str, method: str, params: dict) -> dict:
    answer = httpx.post(
        f"{trio.base_url}/a2a/acme/gate/",
        json={"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params},
        headers={"A2A-Version": "1.0", **trio.auth(token)},
        timeout=60,
    )
    return answer.json()


def api(trio, verb: str, path: str, token: str) -> httpx.Response:
    url = f"{trio.base_url}/api/v1/tenants/acme/{path}"
    return httpx.request(verb, url, headers=trio.auth(token), timeout=30)


def reply(task_id: str, text: str) -> dict:
    return new_message(text, taskId=task_id)


def status_text(task: dict) -> str:
    return "\n".join(p.get("text", "") for p in task["status"].get("message", {}).get("parts", []))


def artifact_text(task: dict) -> str:
    return "\n".join(p.get("text", "") for a in task.get("artifacts", []) for p in a["parts"])


@pytest.fixture(scope="module")
def gate(trio):
    """An authenticated approval agent of acme, and a client of acme that may approve."""
    from agents.models import Agent
    from tenants.services import oauth_client_create

    Agent.objects.update_or_create(
        tenant=trio.tenants["acme"],
        slug="gate",
        defaults={"name": "Gate", "handler": "approval", "visibility": "authenticated", "enabled": True},
    )
    app, secret = oauth_client_create(
        tenant=trio.tenants["acme"],
        actor="system:test",
        name="payments approver",
        scopes=["a2a:invoke", "a2a:read", "a2a:approve"],
    )
    # Through the real client-credentials flow: the scope is one a tenant can grant a client.
    issued = trio.client_credentials_token(tenancy.Client(app.client_id, secret)).json()
    assert set(issued["scope"].split()) == {"a2a:invoke", "a2a:read", "a2a:approve"}
    return issued["access_token"]


def waiting(trio, token: str) -> dict:
    task = a2a(trio, token, "SendMessage", new_message(REQUEST))["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    return task


def settled(trio, token: str, task_id: str) -> dict:
    """The task once its turn after an operator's decision is over (the API answers before it runs)."""
    deadline = time.monotonic() + 30
    while True:
        task = a2a(trio, token, "GetTask", {"id": task_id})["result"]
        if task["status"]["state"] not in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"):
            return task
        assert time.monotonic() < deadline, task["status"]
        time.sleep(0.1)


def test_a_client_with_a2a_approve_approves_another_clients_request(trio, gate):
    requester = trio.token("acme", ["a2a:invoke", "a2a:read"])
    task = waiting(trio, requester)
    # The approver sees what it is asked to decide, although another client sent it.
    seen = a2a(trio, gate, "GetTask", {"id": task["id"]})["result"]
    assert seen["history"][0]["parts"] == [{"text": REQUEST}]
    approval = reply(task["id"], "approve")
    done = a2a(trio, gate, "SendMessage", approval)["result"]["task"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert artifact_text(done) == f'Approved by payments approver: "{REQUEST}" was carried out.'
    from tasks_app.models import Message

    record = Message.objects.get(message_id=approval["message"]["messageId"]).approval
    assert record["decision"] == "granted" and record["principal"].startswith("client:")


def test_a_client_with_a2a_approve_can_deny(trio, gate):
    task = waiting(trio, trio.token("acme", ["a2a:invoke", "a2a:read"]))
    denied = a2a(trio, gate, "SendMessage", reply(task["id"], "deny"))["result"]["task"]
    assert denied["status"]["state"] == "TASK_STATE_REJECTED"
    assert status_text(denied) == f'Denied by payments approver: "{REQUEST}" was not carried out.'


@pytest.mark.parametrize(
    "text",
    [
        "Do not approve this",
        "not allowed",
        "why would I approve?",
        "Yes, first tell me what this deploys",
        "нет, approve",
        "approve ❌",
    ],
)
def test_an_approvers_answer_that_is_not_plainly_a_decision_decides_nothing(trio, gate, text):
    task = waiting(trio, trio.token("acme", ["a2a:invoke", "a2a:read"]))
    answer = reply(task["id"], text)
    still = a2a(trio, gate, "SendMessage", answer)["result"]["task"]
    assert still["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    assert "neither an approval nor a denial" in status_text(still)
    assert artifact_text(still) == ""
    from tasks_app.models import Message

    assert Message.objects.get(message_id=answer["message"]["messageId"]).approval is None


def test_a2a_approve_does_not_let_a_client_approve_its_own_request(trio):
    # One client holds both rights: requesting and approving; its own request still needs someone else.
    both = trio.token("acme", ["a2a:invoke", "a2a:read", "a2a:approve"])
    task = waiting(trio, both)
    still = a2a(trio, both, "SendMessage", reply(task["id"], "approve"))["result"]["task"]
    assert still["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    assert "did not come from an approver" in status_text(still)


def test_a_client_without_a2a_approve_cannot_even_see_anothers_request(trio):
    task = waiting(trio, trio.token("acme", ["a2a:invoke", "a2a:read"]))
    other = trio.clients["acme-second"]
    token = trio.client_credentials_token(other, scope="a2a:invoke a2a:read").json()["access_token"]
    assert a2a(trio, token, "GetTask", {"id": task["id"]})["error"]["code"] == -32001
    assert a2a(trio, token, "SendMessage", reply(task["id"], "approve"))["error"]["code"] == -32001


# A person's token that decides auth-required tasks through the management API.
APPROVER_SCOPES = [*tenancy.ALL_SCOPES, "a2a:approve"]


def test_an_operators_grant_through_the_api_completes_it_and_is_audited(trio, gate):
    requester = trio.token("acme", ["a2a:invoke", "a2a:read"])
    task = waiting(trio, requester)
    # A token of bob's with the task scope alone may read the task, not decide it.
    reader = trio.token("acme", ["tasks:read"], user="bob")
    refused = api(trio, "POST", f"tasks/{task['id']}/grant/", reader)
    assert refused.status_code == 403 and "a2a:approve" in refused.json()["detail"]
    assert api(trio, "GET", f"tasks/{task['id']}/", reader).status_code == 200
    bob = trio.token("acme", APPROVER_SCOPES, user="bob")
    granted = api(trio, "POST", f"tasks/{task['id']}/grant/", bob)
    assert granted.status_code == 200, granted.text
    done = settled(trio, requester, task["id"])
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert artifact_text(done) == f'Approved by bob: "{REQUEST}" was carried out.'
    alice = trio.token("acme", user="alice")
    audit = api(trio, "GET", f"audit/?target_id={task['id']}", alice).json()["results"]
    assert [(e["action"], e["actor"]) for e in audit] == [("task.authorization_granted", "user:bob")]


def test_an_operators_decision_on_a_request_that_asked_again_since_they_read_it_is_refused(trio, gate):
    requester = trio.token("acme", ["a2a:invoke", "a2a:read"])
    task = waiting(trio, requester)
    bob = trio.token("acme", APPROVER_SCOPES, user="bob")
    read = api(trio, "GET", f"tasks/{task['id']}/", bob).json()
    # The requester answers meanwhile, and the agent asks again: the same state, another question.
    again = a2a(trio, requester, "SendMessage", reply(task["id"], "maybe later"))["result"]["task"]
    assert again["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    url = f"{trio.base_url}/api/v1/tenants/acme/tasks/{task['id']}/grant/"
    stale = httpx.post(url, json={"event_seq": read["event_seq"]}, headers=trio.auth(bob), timeout=30)
    assert stale.status_code == 409, stale.text
    assert "answered by the caller" in stale.json()["detail"]
    from tasks_app.models import Message

    assert Message.objects.filter(task_id=task["id"], role="user").count() == 2
    assert httpx.post(url, json={"event_seq": -1}, headers=trio.auth(bob), timeout=30).status_code == 400
    current = api(trio, "GET", f"tasks/{task['id']}/", bob).json()["event_seq"]
    granted = httpx.post(url, json={"event_seq": current}, headers=trio.auth(bob), timeout=30)
    assert granted.status_code == 200, granted.text
    assert settled(trio, requester, task["id"])["status"]["state"] == "TASK_STATE_COMPLETED"


def test_an_operator_cannot_approve_their_own_request(trio):
    bob = trio.token("acme", ["a2a:invoke", "a2a:read", "a2a:approve", "tasks:read"], user="bob")
    task = waiting(trio, bob)
    # Not through the management API ...
    refused = api(trio, "POST", f"tasks/{task['id']}/grant/", bob)
    assert refused.status_code == 403 and "yourself" in refused.json()["detail"]
    # ... nor by answering over A2A, although bob is an operator and his token has a2a:approve.
    still = a2a(trio, bob, "SendMessage", reply(task["id"], "approve"))["result"]["task"]
    assert still["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    # Someone else with the right can.
    alice = trio.token("acme", APPROVER_SCOPES, user="alice")
    assert api(trio, "POST", f"tasks/{task['id']}/grant/", alice).status_code == 200
    done = settled(trio, bob, task["id"])
    assert artifact_text(done) == f'Approved by alice: "{REQUEST}" was carried out.'


def test_a_viewer_is_no_approver(trio):
    requester = trio.token("acme", ["a2a:invoke", "a2a:read"])
    task = waiting(trio, requester)
    dave = trio.token("acme", user="dave")
    assert api(trio, "POST", f"tasks/{task['id']}/grant/", dave).status_code == 403
    # A viewer's token with a2a:approve does not make them one either.
    dave_approves = trio.token("acme", ["a2a:invoke", "a2a:read", "a2a:approve"], user="dave")
    answer = a2a(trio, dave_approves, "SendMessage", reply(task["id"], "approve"))
    assert answer["error"]["code"] == -32001  # a viewer does not see others' tasks on the A2A endpoint


def test_another_tenants_approver_cannot_see_or_approve_acmes_request(trio):
    task = waiting(trio, trio.token("acme", ["a2a:invoke", "a2a:read"]))
    charlie = trio.token("globex", user="charlie")
    assert api(trio, "POST", f"tasks/{task['id']}/grant/", charlie).status_code == 404
    globex_approver = trio.token("globex", ["a2a:invoke", "a2a:read", "a2a:approve"])
    answer = httpx.post(
        f"{trio.base_url}/a2a/acme/gate/",
        json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": reply(task["id"], "approve")},
        headers={"A2A-Version": "1.0", **trio.auth(globex_approver)},
        timeout=30,
    )
    assert answer.status_code == 401
