"""The agents list and page say when an agent cannot serve, and why; "Check now" checks afresh.

Results are cached for a minute (agents/health.py), so a remote that comes back
shows as serving once someone presses "Check now" (or the minute is up).
"""

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from playwright.sync_api import expect

from agents.models import Agent
from tenants.models import Tenant
from tests.console.conftest import orm, screenshot
from tests.live import free_port


def _make(slug: str, handler: str, config: dict) -> str:
    orm(
        lambda: Agent.objects.update_or_create(
            tenant=Tenant.objects.get(slug="acme"),
            slug=slug,
            defaults={"name": slug, "handler": handler, "config": config, "enabled": True},
        )
    )
    return slug


@pytest.fixture
def card_server():
    """start(port, card): serve `card` at /.well-known/agent-card.json on a loopback port."""
    servers = []

    def start(port: int, card: dict) -> None:
        body = json.dumps(card).encode()

        class Card(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                found = self.path == "/.well-known/agent-card.json"
                self.send_response(200 if found else 404)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body if found else b"{}")

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", port), Card)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_agents_that_cannot_serve_are_flagged_with_the_reason(server, sign_in, watch_console, card_server):
    suffix = uuid.uuid4().hex[:6]
    port = free_port()
    proxy = _make(f"health-proxy-{suffix}", "a2a_proxy", {"url": f"http://127.0.0.1:{port}/"})
    bad = _make(f"health-config-{suffix}", "progress", {"duration": "soon"})
    gone = _make(f"health-gone-{suffix}", "uninstalled", {})
    fine = _make(f"health-echo-{suffix}", "echo", {})

    alice = watch_console(sign_in("alice"))
    alice.goto("/console/t/acme/agents/")

    def status(slug):
        return alice.locator("tr", has=alice.get_by_role("link", name=slug, exact=True)).get_by_test_id(
            "agent-status"
        )

    expect(status(proxy)).to_contain_text("Can't serve")
    expect(status(proxy)).to_contain_text("The remote agent is unreachable")
    expect(status(proxy)).to_contain_text("could not be reached")
    expect(status(bad)).to_contain_text(
        'Can\'t serve Its config is invalid: "duration" must be a number of seconds from 0 to 60, not "soon".'
    )
    expect(status(gone)).to_contain_text(
        "Can't serve Its handler is missing: Handler 'uninstalled' is not installed"
    )
    expect(status(fine)).to_have_text("Serving calls")
    screenshot(alice, "agents-health")

    # The remote comes up: the cached result stands until someone checks again.
    card = httpx.get(f"{server.agent_url('echo')}.well-known/agent-card.json", timeout=30).json()
    card_server(port, card)
    alice.get_by_role("link", name=proxy, exact=True).click()
    expect(alice.get_by_test_id("agent-status")).to_contain_text("Can't serve")
    alice.get_by_role("button", name="Check now").click()
    expect(alice.locator(".flash")).to_contain_text(f"Checked: {proxy} can serve calls.")
    expect(alice.get_by_test_id("agent-status")).to_contain_text("Serving calls")
    screenshot(alice, "agent-health-checked")
    alice.goto("/console/t/acme/agents/")
    expect(status(proxy)).to_have_text("Serving calls")


def test_check_now_is_for_members_of_the_tenant_only(server, sign_in, watch_console):
    slug = _make(f"health-private-{uuid.uuid4().hex[:6]}", "echo", {})
    charlie = watch_console(sign_in("charlie"))
    token = next(cookie["value"] for cookie in charlie.context.cookies() if cookie["name"] == "csrftoken")
    answer = charlie.request.post(
        f"/console/t/acme/agents/{slug}/check",
        form={"csrfmiddlewaretoken": token},
        headers={"X-CSRFToken": token, "Referer": f"{server.base_url}/console/"},
    )
    # As for a tenant that does not exist: charlie learns nothing about acme.
    assert answer.status == 404
    # The same POST to charlie's own tenant is let through to the view (no such agent there).
    own = charlie.request.post(
        "/console/t/globex/agents/no-such-agent/check",
        form={"csrfmiddlewaretoken": token},
        headers={"X-CSRFToken": token, "Referer": f"{server.base_url}/console/"},
    )
    assert own.status == 404
