"""The platform operator's commands (tenant, agent, oauth_client), run as subprocesses on the test DB."""

import json
import subprocess
import sys
import uuid

import httpx

from tests.api import tenancy
from tests.live import ROOT, child_env

trio = tenancy.trio


def manage(db_settings, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=child_env(db_settings),
        capture_output=True,
        text=True,
        input=stdin,
        timeout=120,
    )


def test_commands_set_up_a_tenant_whose_client_calls_its_authenticated_agent(trio, db_settings):
    from agents.models import Agent
    from tenants.models import Application, AuditEvent, Membership

    slug = f"cli-{uuid.uuid4().hex[:6]}"
    created = manage(db_settings, "tenant", "create", slug, "--name", "Made by CLI")
    assert created.returncode == 0, created.stderr
    member = manage(
        db_settings,
        "tenant",
        "add-member",
        slug,
        f"{slug}-owner",
        "--role",
        "owner",
        "--password",
        tenancy.PASSWORD,
    )
    assert member.returncode == 0, member.stderr
    assert Membership.objects.get(tenant__slug=slug).role == "owner"
    agent = manage(
        db_settings,
        "agent",
        "create",
        "--tenant",
        slug,
        "--slug",
        "bot",
        "--handler",
        "echo",
        "--authenticated",
    )
    assert agent.returncode == 0, agent.stderr
    assert Agent.objects.get(tenant__slug=slug, slug="bot").visibility == "authenticated"
    printed = manage(
        db_settings, "oauth_client", "create", "--tenant", slug, "--scopes", "a2a:invoke,a2a:read"
    )
    assert printed.returncode == 0, printed.stderr
    credentials = json.loads(printed.stdout)
    assert set(credentials) == {"client_id", "client_secret"}
    stored = Application.objects.get(client_id=credentials["client_id"])
    assert stored.client_secret != credentials["client_secret"] and stored.scope_set == {
        "a2a:invoke",
        "a2a:read",
    }

    client = tenancy.Client(credentials["client_id"], credentials["client_secret"])
    token = trio.client_credentials_token(client).json()["access_token"]
    answer = httpx.post(
        f"{trio.base_url}/a2a/{slug}/bot/",
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": tenancy.new_message("from the cli"),
        },
        headers={"A2A-Version": "1.0", **trio.auth(token)},
        timeout=30,
    ).json()
    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    actions = set(AuditEvent.objects.filter(tenant__slug=slug).values_list("action", flat=True))
    assert actions == {"tenant.create", "member.add", "agent.create", "oauth_client.create"}


def test_commands_refuse_bad_input_with_a_message(trio, db_settings):
    unknown_handler = manage(
        db_settings, "agent", "create", "--tenant", "acme", "--slug", "x", "--handler", "os.system"
    )
    assert unknown_handler.returncode != 0 and "handler must be one of" in unknown_handler.stderr
    no_tenant = manage(db_settings, "oauth_client", "create", "--tenant", "no-such-tenant")
    assert no_tenant.returncode != 0 and "No tenant 'no-such-tenant'" in no_tenant.stderr
    bad_scope = manage(db_settings, "oauth_client", "create", "--tenant", "acme", "--scopes", "root")
    assert bad_scope.returncode != 0 and "scopes" in bad_scope.stderr
    duplicate = manage(db_settings, "tenant", "create", "acme")
    assert duplicate.returncode != 0 and "slug" in duplicate.stderr
    # No terminal and no --password: a new user cannot be given a password, so nothing is created.
    no_password = manage(
        db_settings, "tenant", "add-member", "acme", "newcomer", "--role", "viewer", stdin=""
    )
    assert no_password.returncode != 0 and "--password" in no_password.stderr
    from django.contrib.auth import get_user_model

    assert not get_user_model().objects.filter(username="newcomer").exists()


def test_the_seed_makes_secure_echo_and_a_demo_client_once(stored):
    from a2a_platform.seed import DEMO_CLIENT_NAME, seed_demo
    from agents.models import Agent
    from tenants.models import Application

    again = seed_demo()
    assert again.demo_client_secret is None and again.demo_client_id
    assert Application.objects.filter(tenant__slug="demo", name=DEMO_CLIENT_NAME).count() == 1
    assert Agent.objects.get(tenant__slug="demo", slug="secure-echo").visibility == "authenticated"


def test_tenant_update_sets_and_clears_quotas_and_retention_and_audits_it(db_settings, stored):
    from tenants.models import AuditEvent, Tenant

    slug = Tenant.objects.create(slug=f"cli-{uuid.uuid4().hex[:6]}", name="CLI").slug
    updated = manage(
        db_settings,
        "tenant",
        "update",
        slug,
        "--max-running-turns",
        "3",
        "--rate-limit",
        "60/m",
        "--retention-days",
        "30",
    )
    assert updated.returncode == 0, updated.stderr
    assert "max running turns 3, rate limit 60/m, retention 30 days" in updated.stdout
    limits = ("max_running_turns", "rate_limit_per_minute", "retention_days")
    assert Tenant.objects.values_list(*limits).get(slug=slug) == (3, 60, 30)
    # Only what is named changes; "none" lifts a limit.
    cleared = manage(db_settings, "tenant", "update", slug, "--rate-limit", "none")
    assert cleared.returncode == 0, cleared.stderr
    assert Tenant.objects.values_list(*limits).get(slug=slug) == (3, None, 30)
    changes = AuditEvent.objects.filter(tenant__slug=slug, action="tenant.settings_change").order_by("pk")
    assert [event.details for event in changes] == [
        {
            "max_running_turns": {"from": None, "to": 3},
            "rate_limit_per_minute": {"from": None, "to": 60},
            "retention_days": {"from": None, "to": 30},
        },
        {"rate_limit_per_minute": {"from": 60, "to": None}},
    ]
    assert {event.actor for event in changes} == {"system:cli"}


def test_tenant_update_refuses_bad_values_and_changes_nothing(db_settings, stored):
    from tenants.models import Tenant

    slug = Tenant.objects.create(slug=f"cli-{uuid.uuid4().hex[:6]}", name="CLI").slug
    # Each process start is slow on a shared machine: one bad rate, one value over the bound.
    refused = manage(db_settings, "tenant", "update", slug, "--retention-days", "7", "--rate-limit", "fast")
    assert refused.returncode != 0 and "'fast' is not a rate like 60/m" in refused.stderr
    too_many = manage(db_settings, "tenant", "update", slug, "--max-running-turns", "999999999")
    assert too_many.returncode != 0 and "max_running_turns" in too_many.stderr
    tenant = Tenant.objects.get(slug=slug)
    assert (tenant.max_running_turns, tenant.rate_limit_per_minute, tenant.retention_days) == (
        None,
        None,
        None,
    )


def test_rotate_secret_gives_a_client_a_new_secret_and_ends_the_old_ones_tokens(trio, db_settings):
    from tenants.models import AuditEvent

    made = manage(
        db_settings, "oauth_client", "create", "--tenant", "acme", "--name", f"rot-{uuid.uuid4().hex[:6]}"
    )
    old = json.loads(made.stdout)
    old_client = tenancy.Client(old["client_id"], old["client_secret"])
    old_token = trio.client_credentials_token(old_client).json()["access_token"]

    rotated = manage(
        db_settings, "oauth_client", "rotate-secret", "--tenant", "acme", "--client-id", old["client_id"]
    )
    assert rotated.returncode == 0, rotated.stderr
    new = json.loads(rotated.stdout)
    assert new["client_id"] == old["client_id"] and new["client_secret"] != old["client_secret"]
    # The new secret works, the old one and the token it got do not.
    assert (
        trio.client_credentials_token(tenancy.Client(new["client_id"], new["client_secret"])).status_code
        == 200
    )
    assert trio.client_credentials_token(old_client).status_code == 401
    tasks = httpx.get(f"{trio.base_url}/api/v1/tenants/acme/tasks/", headers=trio.auth(old_token), timeout=30)
    assert tasks.status_code == 401
    assert AuditEvent.objects.filter(action="oauth_client.rotate_secret", target_id=new["client_id"]).exists()

    # Another tenant's client is not found from here, and a name that matches nothing says so.
    elsewhere = manage(
        db_settings, "oauth_client", "rotate-secret", "--tenant", "globex", "--client-id", new["client_id"]
    )
    assert elsewhere.returncode != 0 and "has no active client" in elsewhere.stderr
