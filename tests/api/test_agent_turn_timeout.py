"""An agent's turn time limit is set through the management API and the `agent` command, and audited."""

import uuid

from agents.models import Agent
from tenants.models import AuditEvent
from tests.api import tenancy
from tests.api.test_api_isolation import call
from tests.platform.test_tenant_commands import manage

trio = tenancy.trio


def _slug() -> str:
    return f"limited-{uuid.uuid4().hex[:8]}"


def test_the_api_sets_and_shows_an_agents_turn_timeout(trio):
    alice = trio.token("acme", user="alice")
    slug = _slug()
    created = call(trio, "POST", "acme", "agents/", alice, {"slug": slug, "handler": "echo"})
    assert created.status_code == 201, created.text
    assert created.json()["turn_timeout"] == 600
    changed = call(trio, "PATCH", "acme", f"agents/{slug}/", alice, {"turn_timeout": 30})
    assert changed.status_code == 200, changed.text
    assert changed.json()["turn_timeout"] == 30
    assert Agent.objects.get(tenant__slug="acme", slug=slug).turn_timeout == 30
    change = AuditEvent.objects.filter(tenant__slug="acme", target_id=slug, action="agent.update").get()
    assert change.details == {"fields": ["turn_timeout"]}


def test_the_api_refuses_a_turn_timeout_out_of_range(trio):
    alice = trio.token("acme", user="alice")
    slug = _slug()
    for bad in (0, -5, 86401, "soon"):
        answer = call(
            trio, "POST", "acme", "agents/", alice, {"slug": slug, "handler": "echo", "turn_timeout": bad}
        )
        assert answer.status_code == 400, answer.text
        assert "turn_timeout" in answer.json()
    assert not Agent.objects.filter(tenant__slug="acme", slug=slug).exists()


def test_the_agent_command_creates_and_updates_the_turn_timeout(trio, db_settings):
    slug = _slug()
    created = manage(
        db_settings,
        "agent",
        "create",
        "--tenant",
        "acme",
        "--slug",
        slug,
        "--handler",
        "echo",
        "--turn-timeout",
        "45",
    )
    assert created.returncode == 0, created.stderr
    assert Agent.objects.get(tenant__slug="acme", slug=slug).turn_timeout == 45
    updated = manage(
        db_settings, "agent", "update", "--tenant", "acme", "--slug", slug, "--turn-timeout", "90"
    )
    assert updated.returncode == 0, updated.stderr
    assert "turn_timeout" in updated.stdout
    assert Agent.objects.get(tenant__slug="acme", slug=slug).turn_timeout == 90
    refused = manage(
        db_settings, "agent", "update", "--tenant", "acme", "--slug", slug, "--turn-timeout", "0"
    )
    assert refused.returncode != 0
    assert "turn_timeout" in refused.stderr or "greater than or equal to 1" in refused.stderr
    assert Agent.objects.get(tenant__slug="acme", slug=slug).turn_timeout == 90
