"""Least privilege for tokens on /api/v1/: agents:manage is agent configuration only.

Task content needs tasks:read; a program changes an agent's visibility (or registers
a public one) only with agents:publish, a person with their role; every change of
visibility is in the audit log with both values.
"""

import uuid

import httpx
import pytest

from tests.api import tenancy
from tests.api.tenancy import new_message
from tests.api.test_api_isolation import call

trio = tenancy.trio


@pytest.fixture(scope="module")
def acme_task(trio) -> str:
    answer = httpx.post(
        f"{trio.base_url}/a2a/acme/vault/",
        json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": new_message("salary of bob")},
        headers={"A2A-Version": "1.0", **trio.auth(trio.token("acme", ["a2a:invoke"]))},
        timeout=30,
    )
    return answer.json()["result"]["task"]["id"]


@pytest.fixture
def private_agent(trio) -> str:
    from agents.models import Agent

    slug = f"private-{uuid.uuid4().hex[:6]}"
    Agent.objects.create(
        tenant=trio.tenants["acme"], slug=slug, name="Private", handler="echo", visibility="authenticated"
    )
    return slug


def _visibility_audit(trio, slug: str) -> list[dict]:
    path = f"audit/?action=agent.visibility&target_id={slug}"
    return call(trio, "GET", "acme", path, trio.token("acme", user="alice")).json()["results"]


def test_agents_manage_alone_reads_no_task_content(trio, acme_task):
    manager = trio.token("acme", ["agents:manage"])
    assert call(trio, "GET", "acme", "agents/", manager).status_code == 200
    listed = call(trio, "GET", "acme", "tasks/", manager)
    assert listed.status_code == 403 and "tasks:read" in listed.json()["detail"]
    one = call(trio, "GET", "acme", f"tasks/{acme_task}/", manager)
    assert one.status_code == 403 and "salary" not in one.text


def test_a_token_given_to_read_tasks_cannot_answer_or_cancel_them(trio):
    from tasks_app.models import Message, Task

    task_id = tenancy.waiting_task(trio)
    tenancy.set_state(task_id, "input-required")
    reader = trio.token("acme", ["tasks:read"], user="bob")  # bob is an operator
    answer = call(trio, "POST", "acme", f"tasks/{task_id}/answer/", reader, {"text": "in bob's name"})
    assert answer.status_code == 403 and "tasks:act" in answer.json()["detail"]
    canceled = call(trio, "POST", "acme", f"tasks/{task_id}/cancel/", reader)
    assert canceled.status_code == 403 and "tasks:act" in canceled.json()["detail"]
    assert Task.objects.get(pk=task_id).state == "input-required"
    assert Message.objects.filter(task_id=task_id, role="user").count() == 1
    # With tasks:act as well, the same person acts.
    actor = trio.token("acme", ["tasks:read", "tasks:act"], user="bob")
    assert call(trio, "POST", "acme", f"tasks/{task_id}/cancel/", actor).status_code == 200
    assert Task.objects.get(pk=task_id).state == "canceled"


def test_tasks_read_reads_the_tenants_tasks_and_nothing_else(trio, acme_task):
    reader = trio.token("acme", ["tasks:read"])
    detail = call(trio, "GET", "acme", f"tasks/{acme_task}/", reader)
    assert detail.status_code == 200
    assert detail.json()["task"]["history"][0]["parts"] == [{"text": "salary of bob"}]
    assert acme_task in {t["id"] for t in call(trio, "GET", "acme", "tasks/", reader).json()["results"]}
    assert call(trio, "GET", "acme", "agents/", reader).status_code == 403
    # It names its tenant, as any API token may.
    assert call(trio, "GET", "acme", "", reader).json()["slug"] == "acme"
    # A program still acts on no task, whatever its scopes.
    assert call(trio, "POST", "acme", f"tasks/{acme_task}/cancel/", reader).status_code == 403


def test_a_person_token_needs_tasks_read_as_well(trio, acme_task):
    alice = trio.token("acme", ["agents:manage"], user="alice")
    assert call(trio, "GET", "acme", f"tasks/{acme_task}/", alice).status_code == 403


def test_another_tenants_tasks_read_sees_nothing_of_acme(trio, acme_task):
    globex_reader = trio.token("globex", ["tasks:read"])
    assert call(trio, "GET", "acme", f"tasks/{acme_task}/", globex_reader).status_code == 404
    listed = call(trio, "GET", "globex", "tasks/", globex_reader).json()["results"]
    assert acme_task not in {t["id"] for t in listed}


def test_agents_manage_alone_cannot_open_an_agent_to_everyone(trio, private_agent):
    manager = trio.token("acme", ["agents:manage"])
    refused = call(trio, "PATCH", "acme", f"agents/{private_agent}/", manager, {"visibility": "public"})
    assert refused.status_code == 403 and "agents:publish" in refused.json()["detail"]
    from agents.models import Agent

    assert Agent.objects.get(tenant__slug="acme", slug=private_agent).visibility == "authenticated"
    assert _visibility_audit(trio, private_agent) == []
    # Other changes, and sending the unchanged visibility, are still agent configuration.
    same = {"visibility": "authenticated", "description": "set by a program"}
    assert call(trio, "PATCH", "acme", f"agents/{private_agent}/", manager, same).status_code == 200
    public = {"slug": f"pub-{uuid.uuid4().hex[:6]}", "handler": "echo"}
    assert call(trio, "POST", "acme", "agents/", manager, public).status_code == 403
    private = {**public, "visibility": "authenticated"}
    assert call(trio, "POST", "acme", "agents/", manager, private).status_code == 201


def test_agents_publish_changes_visibility_and_it_is_audited(trio, private_agent):
    publisher = trio.token("acme", ["agents:manage", "agents:publish"])
    opened = call(trio, "PATCH", "acme", f"agents/{private_agent}/", publisher, {"visibility": "public"})
    assert opened.status_code == 200 and opened.json()["visibility"] == "public"
    card = httpx.get(f"{trio.base_url}/a2a/acme/{private_agent}/.well-known/agent-card.json").json()
    assert "securitySchemes" not in card
    [event] = _visibility_audit(trio, private_agent)
    assert event["actor"] == f"client:{trio.clients['acme'].client_id}"
    assert event["details"] == {"from": "authenticated", "to": "public"}


def test_a_person_changes_visibility_by_role_and_it_is_audited(trio, private_agent):
    alice = trio.token("acme", ["agents:manage"], user="alice")
    changed = call(trio, "PATCH", "acme", f"agents/{private_agent}/", alice, {"visibility": "public"})
    assert changed.status_code == 200
    [event] = _visibility_audit(trio, private_agent)
    assert event["actor"] == "user:alice" and event["details"]["to"] == "public"
    # An operator's role does not reach agent settings, whatever the token says.
    bob = trio.token("acme", ["agents:manage", "agents:publish"], user="bob")
    back = {"visibility": "authenticated"}
    assert call(trio, "PATCH", "acme", f"agents/{private_agent}/", bob, back).status_code == 403


def test_a_deactivated_persons_tokens_stop_working_at_once(trio):
    """As signing in to the console stops: on the management API and on the A2A endpoints alike."""
    token = trio.token("acme", user="dave")
    a2a = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}

    def answers() -> tuple[int, int]:
        listed = call(trio, "GET", "acme", "tasks/", token)
        sent = httpx.post(
            f"{trio.base_url}/a2a/acme/vault/",
            json=a2a,
            headers={"A2A-Version": "1.0", **trio.auth(token)},
            timeout=30,
        )
        return listed.status_code, sent.status_code

    assert answers() == (200, 200)
    dave = trio.users["dave"]
    dave.is_active = False
    dave.save(update_fields=["is_active"])
    try:
        assert answers() == (401, 401)
        # Nor can a refresh token of dave's get a new one.
        refreshed = _refresh(trio, _refresh_token_of(trio, "dave"))
        assert refreshed.status_code == 400 and refreshed.json()["error"] == "invalid_grant"
    finally:
        dave.is_active = True
        dave.save(update_fields=["is_active"])
    assert answers() == (200, 200)
    assert _refresh(trio, _refresh_token_of(trio, "dave")).status_code == 200


def _refresh_token_of(trio, username: str) -> str:
    """A refresh token of the tenant's interactive client for `username`, as DOT stores one."""
    import secrets
    from datetime import timedelta

    from django.utils import timezone
    from oauth2_provider.models import AccessToken, RefreshToken, set_token_value

    from tenants.models import Application

    client = Application.objects.get(client_id=trio.clients["acme-interactive"].client_id)
    expires = timezone.now() + timedelta(hours=1)
    access = AccessToken(application=client, user=trio.users[username], scope="tasks:read", expires=expires)
    set_token_value(access, secrets.token_urlsafe(24))
    access.save()
    raw = secrets.token_urlsafe(24)
    refresh = RefreshToken(application=client, user=trio.users[username], access_token=access)
    set_token_value(refresh, raw)
    refresh.save()
    return raw


def _refresh(trio, refresh_token: str) -> httpx.Response:
    data = {
        "grant_type": "refresh_token",
        "refresh_token": refresh_token,
        "client_id": trio.clients["acme-interactive"].client_id,
    }
    return httpx.post(f"{trio.base_url}/o/token/", data=data, timeout=30)


@pytest.fixture
def proxy_with_a_key(trio):
    from agents.models import Agent

    slug = f"keyed-{uuid.uuid4().hex[:6]}"
    Agent.objects.create(
        tenant=trio.tenants["acme"],
        slug=slug,
        name="Keyed",
        handler="a2a_proxy",
        config={"url": "https://agents.example.com/a2a", "headers": {"Authorization": "Bearer REMOTE-KEY"}},
    )
    return slug


def test_an_agents_secrets_are_shown_only_to_those_who_may_edit_it(trio, proxy_with_a_key):
    def config_as(user: str) -> dict:
        answer = call(trio, "GET", "acme", f"agents/{proxy_with_a_key}/", trio.token("acme", user=user))
        assert answer.status_code == 200, answer.text
        return answer.json()["config"]

    assert config_as("alice")["headers"] == {"Authorization": "Bearer REMOTE-KEY"}  # the owner
    for reader in ("bob", "dave"):  # an operator, a viewer
        shown = config_as(reader)
        assert shown["headers"] == {"Authorization": "********"}
        assert shown["url"] == "https://agents.example.com/a2a"
    listed = call(trio, "GET", "acme", "agents/", trio.token("acme", user="dave")).json()["results"]
    assert "REMOTE-KEY" not in str(listed)
