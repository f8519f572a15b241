"""Every management endpoint hides other tenants: their tenant and their objects answer 404,
exactly as missing ones do, and no list shows anything of theirs."""

import uuid

import httpx
import pytest

from tests.api import tenancy
from tests.api.tenancy import new_message

trio = tenancy.trio

# (verb, path under /api/v1/tenants/<tenant>/, body); `{agent}`, `{task}`, `{client}`, `{member}` get filled.
ENDPOINTS = [
    ("GET", "", None),
    ("PATCH", "", {"max_running_turns": 1}),
    ("GET", "handlers/", None),
    ("GET", "agents/", None),
    ("POST", "agents/", {"slug": "intruder", "handler": "echo"}),
    ("GET", "agents/{agent}/", None),
    ("PATCH", "agents/{agent}/", {"name": "Pwned"}),
    ("DELETE", "agents/{agent}/", None),
    ("POST", "agents/{agent}/enable/", None),
    ("POST", "agents/{agent}/disable/", None),
    ("GET", "agents/{agent}/card/", None),
    ("GET", "clients/", None),
    ("POST", "clients/", {"scopes": ["a2a:invoke"]}),
    ("GET", "clients/{client}/", None),
    ("POST", "clients/{client}/revoke/", None),
    ("GET", "tasks/", None),
    ("GET", "tasks/{task}/", None),
    ("POST", "tasks/{task}/cancel/", None),
    ("POST", "tasks/{task}/answer/", {"text": "yes"}),
    ("POST", "tasks/{task}/grant/", None),
    ("POST", "tasks/{task}/deny/", None),
    ("GET", "members/", None),
    ("POST", "members/", {"username": "charlie", "role": "owner"}),
    ("GET", "members/{member}/", None),
    ("PATCH", "members/{member}/", {"role": "viewer"}),
    ("DELETE", "members/{member}/", None),
    ("GET", "audit/", None),
]
IDS = [f"{verb} {path or '.'}" for verb, path, _ in ENDPOINTS]


def call(trio, verb: str, tenant: str, path: str, token: str, body=None) -> httpx.Response:
    url = f"{trio.base_url}/api/v1/tenants/{tenant}/{path}"
    return httpx.request(verb, url, json=body, headers=trio.auth(token), timeout=30)


@pytest.fixture(scope="module")
def acme_objects(trio):
    task = httpx.post(
        f"{trio.base_url}/a2a/acme/vault/",
        json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": new_message("acme only")},
        headers={"A2A-Version": "1.0", **trio.auth(trio.token("acme"))},
        timeout=30,
    ).json()["result"]["task"]
    return {"agent": "lobby", "task": task["id"], "client": trio.clients["acme"].client_id, "member": "alice"}


MISSING = {
    "agent": "no-such-agent",
    "task": str(uuid.uuid4()),
    "client": "no-such-client",
    "member": "nobody",
}


@pytest.mark.parametrize("verb,path,body", ENDPOINTS, ids=IDS)
def test_another_tenants_admin_gets_404_for_acme_like_for_a_missing_tenant(
    trio, acme_objects, verb, path, body
):
    charlie = trio.token("globex", user="charlie")
    theirs = call(trio, verb, "acme", path.format(**acme_objects), charlie, body)
    missing = call(trio, verb, "no-such-tenant", path.format(**MISSING), charlie, body)
    assert theirs.status_code == 404, theirs.text
    assert (theirs.status_code, theirs.json()) == (missing.status_code, missing.json())


OBJECT_ENDPOINTS = [endpoint for endpoint in ENDPOINTS if "{" in endpoint[1]]


@pytest.mark.parametrize("verb,path,body", OBJECT_ENDPOINTS, ids=[f"{v} {p}" for v, p, _ in OBJECT_ENDPOINTS])
def test_acmes_objects_under_globex_answer_like_missing_ones(trio, acme_objects, verb, path, body):
    charlie = trio.token("globex", user="charlie")
    # acme's `lobby` exists only in acme; globex also has a `vault`, which is its own.
    theirs = call(trio, verb, "globex", path.format(**acme_objects), charlie, body)
    missing = call(trio, verb, "globex", path.format(**MISSING), charlie, body)
    assert theirs.status_code == 404, theirs.text
    assert theirs.json() == missing.json()


def test_globex_lists_show_nothing_of_acme(trio, acme_objects):
    charlie = trio.token("globex", user="charlie")
    lists = {path: call(trio, "GET", "globex", path, charlie).json() for path in ENDPOINTS_LISTS}
    agents = {agent["slug"] for agent in lists["agents/"]["results"]}
    assert "lobby" not in agents and "vault" in agents
    assert acme_objects["task"] not in {task["id"] for task in lists["tasks/"]["results"]}
    assert trio.clients["acme"].client_id not in {c["client_id"] for c in lists["clients/"]["results"]}
    from tenants.models import Membership

    # Other test files may add people to globex too: what counts is that none of acme's shows.
    members = {m["username"] for m in lists["members/"]["results"]}
    globex = set(Membership.objects.filter(tenant__slug="globex").values_list("user__username", flat=True))
    acme_only = (
        set(Membership.objects.filter(tenant__slug="acme").values_list("user__username", flat=True)) - globex
    )
    assert "charlie" in members and members == globex and acme_only and not members & acme_only
    assert all(event["target_id"] != acme_objects["task"] for event in lists["audit/"]["results"])
    tenants = httpx.get(f"{trio.base_url}/api/v1/tenants/", headers=trio.auth(charlie)).json()
    assert [t["slug"] for t in tenants] == ["globex"]


ENDPOINTS_LISTS = ["agents/", "tasks/", "clients/", "members/", "audit/"]


def test_a_program_token_of_globex_gets_404_at_acme_too(trio):
    program = trio.token("globex")
    assert call(trio, "GET", "acme", "agents/", program).status_code == 404
    assert call(trio, "GET", "globex", "agents/", program).status_code == 200


def test_a_session_of_globex_gets_404_at_acme(trio):
    from django.test import Client

    browser = Client()
    browser.force_login(trio.users["charlie"])
    cookies = {"sessionid": browser.cookies["sessionid"].value}
    url = f"{trio.base_url}/api/v1/tenants/acme/agents/"
    assert httpx.get(url, cookies=cookies).status_code == 404
    assert httpx.get(f"{trio.base_url}/api/v1/tenants/globex/agents/", cookies=cookies).status_code == 200


def test_no_expired_or_revoked_credentials_get_in(trio):
    url = f"{trio.base_url}/api/v1/tenants/acme/agents/"
    nothing = httpx.get(url)
    assert nothing.status_code == 401 and nothing.headers["WWW-Authenticate"].startswith("Bearer")
    expired = trio.token("acme", user="alice", expires_in=-5)
    assert httpx.get(url, headers=trio.auth(expired)).status_code == 401
    assert httpx.get(url, headers=trio.auth("garbage")).status_code == 401


def test_a_token_without_agents_manage_is_refused_with_403(trio):
    token = trio.token("acme", ["a2a:invoke", "a2a:read", "a2a:push"])
    assert call(trio, "GET", "acme", "agents/", token).status_code == 403
