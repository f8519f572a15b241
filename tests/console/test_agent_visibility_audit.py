"""A person who opens an agent to everyone in the console leaves an audit entry saying so."""

import uuid

from playwright.sync_api import expect

from agents.models import Agent
from tenants.models import AuditEvent, Tenant
from tests.console.conftest import orm


def test_a_visibility_change_in_the_console_is_audited_with_both_values(server, sign_in):
    slug = f"private-{uuid.uuid4().hex[:6]}"
    orm(
        lambda: Agent.objects.create(
            tenant=Tenant.objects.get(slug="acme"),
            slug=slug,
            name="Private",
            handler="echo",
            visibility=Agent.Visibility.AUTHENTICATED,
        )
    )
    alice = sign_in("alice")
    alice.goto(f"/console/t/acme/agents/{slug}/edit/")
    alice.get_by_label("Visibility").select_option("public")
    alice.get_by_role("button", name="Save").click()
    expect(alice.locator(".flash")).to_contain_text("Agent saved")
    events = orm(
        lambda: list(
            AuditEvent.objects.filter(target_id=slug, action="agent.visibility").values("actor", "details")
        )
    )
    assert events == [{"actor": "user:alice", "details": {"from": "authenticated", "to": "public"}}]
    # Only the visibility changed: no second, empty "agent.update" entry.
    assert orm(lambda: AuditEvent.objects.filter(target_id=slug, action="agent.update").count()) == 0
