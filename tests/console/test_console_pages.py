"""A tenant admin's pages: dashboard, tasks, agents (edit, validation, enable/disable), clients, audit."""

import uuid

from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from agents.models import Agent
from tenants.models import Application
from tests.conftest import user_message
from tests.console.conftest import PASSWORD, orm, screenshot


def test_an_owner_walks_the_main_pages(server, sign_in, acme_agent, rpc):
    slug = acme_agent("echo", "echo")
    rpc(
        "SendMessage",
        user_message("hello from the pages test", f"msg-{uuid.uuid4()}"),
        agent=slug,
        tenant="acme",
    )
    alice = sign_in("alice")
    expect(alice.get_by_role("heading", name="Acme")).to_be_visible()
    expect(alice.locator(".queues")).to_contain_text("waiting for input")
    screenshot(alice, "dashboard")

    alice.get_by_role("link", name="Tasks", exact=True).click()
    alice.get_by_label("Agent").select_option(slug)
    alice.get_by_label("Text or task id").fill("hello from the pages")
    alice.get_by_role("button", name="Filter").click()
    expect(alice.locator("#task-rows tr")).to_have_count(1)
    expect(alice.locator("#task-rows")).to_contain_text("Completed")
    screenshot(alice, "tasks")

    alice.get_by_role("link", name="Agents", exact=True).click()
    screenshot(alice, "agents")
    alice.get_by_role("link", name="Echo", exact=True).click()
    expect(alice.get_by_test_id("card-preview")).to_contain_text('"protocolBinding": "JSONRPC"')
    expect(alice.locator("#curl-example")).to_contain_text(f"/a2a/acme/{slug}/")
    alice.get_by_role("link", name="Edit").click()
    alice.get_by_label("Raw JSON").check()
    alice.get_by_label("Config (JSON)").fill('{"greeting": "hi",}')
    alice.get_by_role("button", name="Save").click()
    expect(alice.get_by_role("alert")).to_contain_text("Config is not valid JSON")
    expect(alice.get_by_role("alert")).to_contain_text("line 1")
    # What was typed stays in the raw view to fix.
    expect(alice.get_by_label("Config (JSON)")).to_be_visible()
    alice.get_by_label("Config (JSON)").fill("[1, 2]")
    alice.get_by_role("button", name="Save").click()
    expect(alice.get_by_role("alert")).to_contain_text("Config must be a JSON object")
    alice.get_by_label("Config (JSON)").fill('{"greeting": "hi"}')
    alice.get_by_role("button", name="Save").click()
    expect(alice.get_by_role("alert")).to_have_text('The Echo handler takes no settings: remove "greeting".')
    alice.get_by_label("Config (JSON)").fill("{}")
    alice.get_by_label("Description").fill("Says hello back")
    alice.get_by_role("button", name="Save").click()
    expect(alice.locator(".flash")).to_contain_text("Agent saved")
    stored = orm(lambda: Agent.objects.get(tenant__slug="acme", slug=slug))
    assert (stored.config, stored.description) == ({}, "Says hello back")

    alice.get_by_role("button", name="Disable").click()
    expect(alice.locator(".facts")).to_contain_text("Disabled")
    disabled = rpc("SendMessage", user_message("anyone?", f"msg-{uuid.uuid4()}"), agent=slug, tenant="acme")
    assert "error" in disabled
    alice.get_by_role("button", name="Enable").click()
    expect(alice.locator(".facts")).to_contain_text("Serving calls")

    alice.get_by_role("link", name="OAuth clients").click()
    alice.get_by_role("link", name="Create a client").click()
    name = f"billing-{uuid.uuid4().hex[:6]}"
    alice.get_by_label("Name").fill(name)
    alice.get_by_role("button", name="Create client").click()
    secret = alice.get_by_test_id("client-secret").inner_text()
    client_id = alice.locator("#client-id").inner_text()
    assert len(secret) > 30
    screenshot(alice, "oauth-client-created")
    # The secret works once for a token, and is never shown again.
    token = alice.request.post(
        "/o/token/",
        form={"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret},
    )
    assert token.status == 200, token.text()
    alice.goto("/console/t/acme/clients/")
    expect(alice.locator("main")).to_contain_text(client_id)
    expect(alice.locator("main")).not_to_contain_text(secret)
    screenshot(alice, "oauth-clients")
    alice.get_by_role("button", name=f"Revoke {name}").click()
    expect(alice.locator(".flash")).to_contain_text("is revoked")
    assert orm(lambda: Application.objects.get(client_id=client_id).revoked_at) is not None

    alice.get_by_role("link", name="Audit log").click()
    log = alice.locator("main table")
    for action in (
        "agent.update",
        "agent.disable",
        "agent.enable",
        "oauth_client.create",
        "oauth_client.revoke",
    ):
        expect(log).to_contain_text(action)
    screenshot(alice, "audit-log")


def test_operators_and_viewers_do_not_get_admin_pages(server, sign_in):
    bob = sign_in("bob")
    expect(bob.get_by_role("link", name="OAuth clients")).to_have_count(0)
    expect(bob.get_by_role("link", name="Register an agent")).to_have_count(0)
    assert bob.goto("/console/t/acme/clients/").status == 403
    assert bob.goto("/console/t/acme/audit/").status == 403
    assert bob.goto("/console/t/acme/agents/new/").status == 403


def _superuser() -> None:
    user, _ = get_user_model().objects.get_or_create(username="root-console", defaults={"is_superuser": True})
    user.is_superuser = True
    user.set_password(PASSWORD)
    user.save()


def test_a_platform_superuser_may_open_any_tenant(server, sign_in, people):
    orm(_superuser)
    root = sign_in("root-console", lands_on="**/console/")
    expect(root.get_by_role("heading", name="Choose a tenant")).to_be_visible()
    root.get_by_role("link", name="Globex").click()
    expect(root.locator(".who")).to_contain_text("owner (platform admin)")
    # The switcher lists every tenant and moves between them.
    root.locator(".switcher summary").click()
    root.locator(".switcher").get_by_role("link", name="Acme").click()
    expect(root.get_by_role("heading", name="Acme")).to_be_visible()
    assert root.goto("/console/t/acme/audit/").status == 200
