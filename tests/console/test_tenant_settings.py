"""Tenant settings in the console: owners change quotas and retention, the dashboard shows use."""

import httpx
import pytest
from playwright.sync_api import expect

from tenants.models import AuditEvent, Tenant
from tests.console.conftest import orm, screenshot

LIMITS = ("max_running_turns", "rate_limit_per_minute", "retention_days")


def _limits(slug: str = "acme") -> tuple:
    return Tenant.objects.values_list(*LIMITS).get(slug=slug)


def _reset(slug: str = "acme") -> None:
    Tenant.objects.filter(slug=slug).update(**dict.fromkeys(LIMITS))


@pytest.fixture
def acme_limits_restored(people):
    """acme is shared by the session: its limits go back to none after the test."""
    yield
    orm(_reset)


def test_an_owner_sets_quotas_and_retention_and_the_dashboard_shows_them(
    server, sign_in, acme_agent, acme_limits_restored
):
    alice = sign_in("alice")
    alice.get_by_role("link", name="Settings").click()
    alice.get_by_label("Max running turns").fill("40")
    alice.get_by_label("Rate limit (requests per minute)").fill("900")
    alice.get_by_label("Retention (days)").fill("0")
    alice.get_by_role("button", name="Save settings").click()
    # 0 is not a limit: the form says so and nothing is stored.
    expect(alice.get_by_role("alert")).to_contain_text("greater than or equal to 1")
    assert orm(_limits) == (None, None, None)

    alice.get_by_label("Retention (days)").fill("120")
    alice.get_by_role("button", name="Save settings").click()
    expect(alice.get_by_text("Settings saved.")).to_be_visible()
    assert orm(_limits) == (40, 900, 120)
    expect(alice.get_by_label("Max running turns")).to_have_value("40")
    audit = orm(
        lambda: AuditEvent.objects.filter(tenant__slug="acme", action="tenant.settings_change").first()
    )
    assert audit.actor == "user:alice" and audit.details["retention_days"] == {"from": None, "to": 120}

    # An anonymous call of acme's public agent counts against its address, shown on the dashboard.
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
    listed = httpx.post(
        f"{server.base_url}/a2a/acme/{acme_agent('quota-echo', 'echo')}/",
        json=body,
        headers={"A2A-Version": "1.0"},
    )
    assert "result" in listed.json(), listed.text
    alice.get_by_role("link", name="Dashboard").click()
    expect(alice.get_by_test_id("quota-turns")).to_contain_text("40")
    expect(alice.get_by_test_id("quota-rate")).to_contain_text("900 per caller")
    expect(alice.get_by_test_id("quota-caller").filter(has_text="ip:127.0.0.1")).to_contain_text("900")
    expect(alice.get_by_test_id("quota-retention")).to_contain_text("120 days")
    screenshot(alice, "tenant-settings-dashboard")

    # Emptying a field lifts the limit.
    alice.goto("/console/t/acme/settings/")
    alice.get_by_label("Rate limit (requests per minute)").fill("")
    alice.get_by_role("button", name="Save settings").click()
    expect(alice.get_by_text("Settings saved.")).to_be_visible()
    assert orm(_limits) == (40, None, 120)


@pytest.mark.parametrize("person", ["bob", "dave"])
def test_operators_and_viewers_see_the_limits_but_not_the_settings(sign_in, acme_limits_restored, person):
    orm(lambda: Tenant.objects.filter(slug="acme").update(max_running_turns=7))
    page = sign_in(person)
    expect(page.get_by_test_id("quota-turns")).to_contain_text("7")
    assert page.get_by_role("link", name="Settings").count() == 0
    assert page.get_by_role("link", name="Change quotas and retention").count() == 0
    assert page.goto("/console/t/acme/settings/").status == 403
    response = page.request.post(
        "/console/t/acme/settings/",
        form={"max_running_turns": "1000"},
        headers={"X-CSRFToken": next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")},
    )
    assert response.status == 403
    assert orm(_limits)[0] == 7


def test_another_tenants_owner_gets_404(sign_in):
    charlie = sign_in("charlie")
    assert charlie.goto("/console/t/acme/settings/").status == 404
