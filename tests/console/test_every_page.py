"""Every console page, at a desktop width and at a phone's 390 px, with no browser console error.

The walk fails on any console error or uncaught exception (a 404 for an asset
or /favicon.ico counts), and at 390 px on any page wider than the screen.
"""

import json
import uuid

import httpx
import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from tenants.models import Membership, Tenant
from tests.conftest import user_message
from tests.console.conftest import PASSWORD, orm, screenshot

# How much wider than the viewport the document may be: none.
NO_OVERFLOW = "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"


def _pages(task_id: str, waiting_id: str, agent: str) -> list[tuple[str, str]]:
    base = "/console/t/acme/"
    return [
        ("dashboard", base),
        ("tasks", base + "tasks/"),
        ("tasks-search", base + "tasks/?q=hello"),
        ("queue-input", base + "queues/input-required/"),
        ("queue-auth", base + "queues/auth-required/"),
        ("task", base + f"tasks/{task_id}/"),
        ("task-waiting", base + f"tasks/{waiting_id}/"),
        ("agents", base + "agents/"),
        ("agent", base + f"agents/{agent}/"),
        ("agent-new", base + "agents/new/"),
        ("agent-edit", base + f"agents/{agent}/edit/"),
        ("clients", base + "clients/"),
        ("client-new", base + "clients/new/"),
        ("audit", base + "audit/"),
    ]


def _member_of_two_tenants() -> str:
    """A viewer of acme and globex: signing in lands on the tenant picker."""
    user, _ = get_user_model().objects.get_or_create(username="picker")
    user.set_password(PASSWORD)
    user.save()
    for slug in ("acme", "globex"):
        Membership.objects.update_or_create(
            user=user, tenant=Tenant.objects.get(slug=slug), defaults={"role": Membership.Role.VIEWER}
        )
    return user.username


@pytest.mark.parametrize("width", [1280, 390])
def test_every_console_page_renders_without_browser_errors(
    server, sign_in, acme_agent, rpc, no_console_errors, width
):
    echo = acme_agent("echo", "echo")
    clarify = acme_agent("clarify", "clarify")
    done = rpc(
        "SendMessage", user_message("hello from every page", f"msg-{uuid.uuid4()}"), agent=echo, tenant="acme"
    )
    waiting = rpc(
        "SendMessage", user_message("Plan the offsite", f"msg-{uuid.uuid4()}"), agent=clarify, tenant="acme"
    )
    task_id, waiting_id = done["result"]["task"]["id"], waiting["result"]["task"]["id"]

    alice = sign_in("alice", width=width)
    for name, path in _pages(task_id, waiting_id, echo):
        response = alice.goto(path)
        assert response.status == 200, (path, response.status)
        alice.wait_for_load_state("networkidle")
        if name in ("dashboard", "agent"):
            # The charts are drawn: the echo task that just completed is in this hour's bar.
            expect(
                alice.locator('[data-testid=chart-tasks] rect[data-state="completed"]').last
            ).to_be_visible()
            expect(alice.get_by_test_id("turn-percentiles")).to_contain_text("p99")
        if width == 390:
            overflow = alice.evaluate(NO_OVERFLOW)
            assert overflow <= 0, f"{path} is {overflow} px wider than a 390 px screen"
            screenshot(alice, f"phone-{name}")
    # The tenant picker, and the sign-in page it came through, at the same width.
    picker = sign_in(orm(_member_of_two_tenants), lands_on="**/console/", width=width)
    expect(picker.get_by_role("heading", name="Choose a tenant")).to_be_visible()
    assert picker.evaluate(NO_OVERFLOW) <= 0
    picker.get_by_role("button", name="Sign out").click()
    picker.goto("/console/login/")
    expect(picker.get_by_label("Username")).to_be_visible()
    assert picker.evaluate(NO_OVERFLOW) <= 0
    if width == 390:
        screenshot(picker, "phone-login")


def test_the_favicon_is_served_and_linked(server, sign_in, no_console_errors):
    icon = httpx.get(f"{server.base_url}/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")
    assert icon.text.startswith("<svg")
    bob = sign_in("bob")
    href = bob.locator("link[rel=icon]").get_attribute("href")
    assert bob.request.get(href).status == 200


def test_the_audit_log_shows_details_as_formatted_json(server, sign_in, acme_agent, rpc, no_console_errors):
    slug = acme_agent("clarify", "clarify")
    task = rpc("SendMessage", user_message("Audit me", f"msg-{uuid.uuid4()}"), agent=slug, tenant="acme")
    task_id = task["result"]["task"]["id"]
    bob = sign_in("bob")
    bob.goto(f"/console/t/acme/tasks/{task_id}/")
    bob.get_by_label("Your answer").fill('An answer with "quotes" and <b>tags</b>')
    bob.get_by_role("button", name="Send answer").click()
    expect(bob.locator(".flash")).to_contain_text("Answer sent")

    alice = sign_in("alice")
    alice.goto("/console/t/acme/audit/")
    row = alice.locator("tr", has=alice.get_by_role("link", name=f"task {task_id[:11]}…")).first
    expect(row).to_contain_text("task.answer")
    # The actor by username, and the details as indented JSON (text, never markup).
    expect(row.locator("td").nth(1)).to_have_text("bob")
    details = row.get_by_test_id("audit-details").inner_text()
    assert json.loads(details) == {"text": 'An answer with "quotes" and <b>tags</b>'}
    assert details.startswith('{\n  "text": ')
    assert "{'text'" not in alice.locator("main").inner_text()
    screenshot(alice, "audit-log-json")
