"""What tenant admins and operators do through /api/v1/: agents, clients, members, task actions, audit."""

import uuid

import httpx

from tests.api import tenancy
from tests.api.test_api_isolation import call

trio = tenancy.trio


def _audit(trio, **filters) -> list[dict]:
    url = f"{trio.base_url}/api/v1/tenants/acme/audit/"
    answer = httpx.get(url, params=filters, headers=trio.auth(trio.token("acme", user="alice")), timeout=30)
    return answer.json()["results"]


def test_owner_registers_changes_disables_and_deletes_an_agent_and_each_step_is_audited(trio):
    alice = trio.token("acme", user="alice")
    slug = f"api-{uuid.uuid4().hex[:8]}"
    created = call(
        trio,
        "POST",
        "acme",
        "agents/",
        alice,
        {"slug": slug, "handler": "echo", "visibility": "authenticated"},
    )
    assert created.status_code == 201, created.text
    assert created.json()["url"] == f"/a2a/acme/{slug}/"
    card = call(trio, "GET", "acme", f"agents/{slug}/card/", alice).json()
    assert "oauth2" in card["public"]["securitySchemes"] and card["extended"]["name"] == slug
    renamed = call(trio, "PATCH", "acme", f"agents/{slug}/", alice, {"name": "Renamed"})
    assert renamed.json()["name"] == "Renamed"
    assert call(trio, "POST", "acme", f"agents/{slug}/disable/", alice).json()["enabled"] is False
    served = httpx.get(f"{trio.base_url}/a2a/acme/{slug}/.well-known/agent-card.json")
    assert served.status_code == 404
    assert call(trio, "POST", "acme", f"agents/{slug}/enable/", alice).json()["enabled"] is True
    assert call(trio, "DELETE", "acme", f"agents/{slug}/", alice).status_code == 204
    actions = [event["action"] for event in _audit(trio, target_type="agent", target_id=slug)]
    assert actions == ["agent.delete", "agent.enable", "agent.disable", "agent.update", "agent.create"]
    assert _audit(trio, target_id=slug)[0]["actor"] == "user:alice"


def test_agent_input_is_validated(trio):
    alice = trio.token("acme", user="alice")
    dotted = call(trio, "POST", "acme", "agents/", alice, {"slug": "x1", "handler": "os.system"})
    assert dotted.status_code == 400 and "handler" in dotted.text
    bad_skill = call(
        trio, "POST", "acme", "agents/", alice, {"slug": "x2", "handler": "echo", "skills": [{"id": 1}]}
    )
    assert bad_skill.status_code == 400
    duplicate = call(trio, "POST", "acme", "agents/", alice, {"slug": "lobby", "handler": "echo"})
    assert duplicate.status_code == 400 and "already has" in duplicate.text
    handlers = {h["name"] for h in call(trio, "GET", "acme", "handlers/", alice).json()}
    assert {"echo", "silent"} <= handlers


def test_roles_viewer_reads_operator_cannot_manage_agents_program_cannot_mint_clients(trio):
    dave = trio.token("acme", user="dave")
    assert call(trio, "GET", "acme", "agents/", dave).status_code == 200
    assert call(trio, "POST", "acme", "agents/", dave, {"slug": "v1", "handler": "echo"}).status_code == 403
    assert call(trio, "GET", "acme", "clients/", dave).status_code == 403
    assert call(trio, "GET", "acme", "audit/", dave).status_code == 403
    bob = trio.token("acme", user="bob")
    assert call(trio, "PATCH", "acme", "agents/lobby/", bob, {"name": "x"}).status_code == 403
    program = trio.token("acme")
    assert (
        call(trio, "PATCH", "acme", "agents/lobby/", program, {"description": "set by a program"}).status_code
        == 200
    )
    refused = call(trio, "POST", "acme", "clients/", program, {"scopes": ["agents:manage"]})
    assert refused.status_code == 403 and "person" in refused.json()["detail"]


def test_owner_creates_a_client_sees_the_secret_once_and_revokes_it(trio):
    alice = trio.token("acme", user="alice")
    created = call(
        trio, "POST", "acme", "clients/", alice, {"name": "ci", "scopes": ["a2a:invoke", "a2a:read"]}
    )
    assert created.status_code == 201
    client = created.json()
    assert client["scopes"] == ["a2a:invoke", "a2a:read"] and client["client_secret"]
    shown = call(trio, "GET", "acme", f"clients/{client['client_id']}/", alice).json()
    assert "client_secret" not in shown
    from tenants.models import Application

    assert Application.objects.get(client_id=client["client_id"]).client_secret != client["client_secret"]
    creds = tenancy.Client(client["client_id"], client["client_secret"])
    token = trio.client_credentials_token(creds).json()["access_token"]
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
    headers = {"A2A-Version": "1.0", **trio.auth(token)}
    assert httpx.post(f"{trio.base_url}/a2a/acme/vault/", json=rpc, headers=headers).status_code == 200
    revoked = call(trio, "POST", "acme", f"clients/{client['client_id']}/revoke/", alice)
    assert revoked.json()["revoked_at"]
    assert httpx.post(f"{trio.base_url}/a2a/acme/vault/", json=rpc, headers=headers).status_code == 401
    assert trio.client_credentials_token(creds).status_code == 401
    actions = [e["action"] for e in _audit(trio, target_type="oauth_client", target_id=client["client_id"])]
    assert actions == ["oauth_client.revoke", "oauth_client.create"]


def test_members_are_added_changed_and_the_last_owner_stays(trio):
    from django.contrib.auth import get_user_model

    get_user_model().objects.get_or_create(username="erin")
    alice = trio.token("acme", user="alice")
    added = call(trio, "POST", "acme", "members/", alice, {"username": "erin", "role": "viewer"})
    assert added.status_code == 201
    assert (
        call(trio, "PATCH", "acme", "members/erin/", alice, {"role": "operator"}).json()["role"] == "operator"
    )
    assert call(trio, "DELETE", "acme", "members/erin/", alice).status_code == 204
    last_owner = call(trio, "PATCH", "acme", "members/alice/", alice, {"role": "viewer"})
    assert last_owner.status_code == 400 and "owner" in last_owner.text
    actions = [e["action"] for e in _audit(trio, target_type="member", target_id="erin")][:3]
    assert actions == ["member.remove", "member.role_change", "member.add"]


def test_operator_answers_grants_denies_and_cancels_tasks_and_each_is_audited(trio):
    # Deciding auth-required tasks takes a2a:approve on a token, as over A2A.
    bob = trio.token("acme", [*tenancy.ALL_SCOPES, "a2a:approve"], user="bob")
    task_id = tenancy.waiting_task(trio)
    assert call(trio, "POST", "acme", f"tasks/{task_id}/answer/", bob, {"text": "42"}).status_code == 409
    tenancy.set_state(task_id, "input-required")
    answered = call(trio, "POST", "acme", f"tasks/{task_id}/answer/", bob, {"text": "42"})
    assert answered.status_code == 200, answered.text
    # The answer shows the task as it is now: the answer's turn may have run (and added its
    # own message) before it was read, the embedded worker being a thread of the same process.
    history = answered.json()["task"]["history"]
    [answer] = [m for m in history if m["role"] == "ROLE_USER" and m["parts"] == [{"text": "42"}]]
    assert history.index(answer) >= len(history) - 2
    for action in ("grant", "deny"):
        tenancy.set_state(task_id, "auth-required")
        assert call(trio, "POST", "acme", f"tasks/{task_id}/{action}/", bob).status_code == 200
    tenancy.set_state(task_id, "auth-required")
    dave = trio.token("acme", user="dave")
    assert call(trio, "POST", "acme", f"tasks/{task_id}/cancel/", dave).status_code == 403
    canceled = call(trio, "POST", "acme", f"tasks/{task_id}/cancel/", bob)
    assert canceled.json()["state"] == "canceled"
    assert call(trio, "POST", "acme", f"tasks/{task_id}/cancel/", bob).status_code == 409
    actions = [e["action"] for e in _audit(trio, target_type="task", target_id=task_id)]
    assert actions == [
        "task.cancel",
        "task.authorization_denied",
        "task.authorization_granted",
        "task.answer",
    ]
    assert {e["actor"] for e in _audit(trio, target_id=task_id)} == {"user:bob"}


def test_task_list_filters(trio):
    alice = trio.token("acme", user="alice")
    task_id = tenancy.waiting_task(trio)
    by_agent = call(trio, "GET", "acme", "tasks/?agent=quiet&limit=200", alice).json()["results"]
    assert task_id in {t["id"] for t in by_agent} and {t["agent"] for t in by_agent} == {"quiet"}
    by_state = call(trio, "GET", "acme", "tasks/?state=completed", alice).json()["results"]
    assert task_id not in {t["id"] for t in by_state}
    assert call(trio, "GET", "acme", "tasks/?state=bogus", alice).status_code == 400
    detail = call(trio, "GET", "acme", f"tasks/{task_id}/", alice).json()
    assert detail["task"]["id"] == task_id and detail["owner"].startswith("client:")
