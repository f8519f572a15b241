"""Quotas and retention in /api/v1/tenants/<tenant>/: owners change them, members read them; audited."""

import httpx
import pytest

from tenants.models import AuditEvent, Tenant
from tests.api import tenancy
from tests.api.tenancy import new_message
from tests.api.test_api_isolation import call

trio = tenancy.trio
LIMITS = {"max_running_turns": 50, "rate_limit_per_minute": 1000, "retention_days": 90}
NO_LIMITS = dict.fromkeys(LIMITS)


@pytest.fixture
def acme_limits_restored(trio):
    """acme is shared by the session: whatever a test sets, it goes back to no limits."""
    yield
    Tenant.objects.filter(slug="acme").update(**NO_LIMITS)


def test_an_owner_sets_and_clears_the_limits_and_each_change_is_audited(trio, acme_limits_restored):
    alice = trio.token("acme", user="alice")
    before = AuditEvent.objects.filter(tenant__slug="acme", action="tenant.settings_change").count()
    changed = call(trio, "PATCH", "acme", "", alice, LIMITS)
    assert changed.status_code == 200, changed.text
    assert {key: changed.json()[key] for key in LIMITS} == LIMITS
    assert Tenant.objects.values(*LIMITS).get(slug="acme") == LIMITS

    # The use shown with the limits: this minute's A2A requests are counted once a rate is set.
    sent = httpx.post(
        f"{trio.base_url}/a2a/acme/vault/",
        json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": new_message("counted")},
        headers={"A2A-Version": "1.0", **trio.auth(trio.token("acme"))},
        timeout=30,
    )
    assert "result" in sent.json()
    shown = call(trio, "GET", "acme", "", alice).json()
    assert shown["usage"]["requests_this_minute"] >= 1
    assert shown["usage"]["running_turns"] >= 0 and shown["max_running_turns"] == 50

    # The same values again change nothing and record nothing; null means no limit.
    call(trio, "PATCH", "acme", "", alice, LIMITS)
    cleared = call(trio, "PATCH", "acme", "", alice, {"rate_limit_per_minute": None})
    assert cleared.json()["rate_limit_per_minute"] is None and cleared.json()["retention_days"] == 90
    events = AuditEvent.objects.filter(tenant__slug="acme", action="tenant.settings_change").order_by("-pk")
    assert events.count() == before + 2
    latest, first = events[0], events[1]
    assert latest.actor == "user:alice" and latest.target_id == "acme"
    assert latest.details == {"rate_limit_per_minute": {"from": 1000, "to": None}}
    assert first.details["max_running_turns"] == {"from": None, "to": 50}
    # The audit endpoint shows them too.
    audit = call(trio, "GET", "acme", "audit/?action=tenant.settings_change", alice).json()["results"]
    assert audit[0]["details"] == latest.details


def test_operators_and_viewers_read_the_limits_but_cannot_change_them(trio, acme_limits_restored):
    for person in ("bob", "dave"):
        token = trio.token("acme", user=person)
        assert call(trio, "GET", "acme", "", token).json()["max_running_turns"] is None
        refused = call(trio, "PATCH", "acme", "", token, {"max_running_turns": 1})
        assert refused.status_code == 403, refused.text
    assert Tenant.objects.get(slug="acme").max_running_turns is None


@pytest.mark.parametrize(
    "body",
    [
        {"max_running_turns": 0},
        {"rate_limit_per_minute": -5},
        {"retention_days": "soon"},
        {"max_running_turns": 10**9},
        {"name": ""},
    ],
)
def test_bad_limits_are_refused_with_400_and_change_nothing(trio, acme_limits_restored, body):
    refused = call(trio, "PATCH", "acme", "", trio.token("acme", user="alice"), body)
    assert refused.status_code == 400, refused.text
    assert set(body) <= set(refused.json())
    assert Tenant.objects.values(*LIMITS).get(slug="acme") == NO_LIMITS
