"""Import a remote A2A agent from its card URL in the console, then call it through the platform.

The "remote" agent is the platform's own demo echo agent on loopback (the test
servers allow private networks, tests/live.py). Every page fails the test on a
browser console error.
"""

import asyncio
import threading
import uuid

import httpx
from a2a.client import ClientConfig, create_client
from a2a.helpers import new_text_message
from a2a.types import Role, SendMessageRequest, TaskState
from playwright.sync_api import expect

from agents.models import Agent
from tenants.models import AuditEvent, Tenant
from tenants.services import oauth_client_create
from tests.console.conftest import orm, screenshot
from tests.live import free_port


def _token(server) -> str:
    """A bearer token of one of acme's OAuth clients, by the client-credentials flow."""
    client, secret = orm(
        oauth_client_create,
        tenant=orm(Tenant.objects.get, slug="acme"),
        actor="system:test",
        name=f"import-test-{uuid.uuid4().hex[:6]}",
        scopes=["a2a:invoke", "a2a:read"],
    )
    answer = httpx.post(
        f"{server.base_url}/o/token/",
        data={"grant_type": "client_credentials"},
        auth=(client.client_id, secret),
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    return answer.json()["access_token"]


def _call(url: str, text: str, token: str | None):
    """Send one message with the official a2a-sdk client (in a thread of its own: Playwright's
    sync API holds this thread's event loop); returns the final task, or raises what it raised."""
    outcome = {}

    async def call():
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx.AsyncClient(headers=headers, timeout=30) as http:
            client = await create_client(url, client_config=ClientConfig(streaming=False, httpx_client=http))
            try:
                request = SendMessageRequest(message=new_text_message(text, role=Role.ROLE_USER))
                return [event async for event in client.send_message(request)][-1].task
            finally:
                await client.close()

    def run():
        try:
            outcome["task"] = asyncio.run(call())
        except BaseException as exc:  # handed to the test, which re-raises it
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["task"]


def test_an_owner_imports_a_remote_agent_from_its_card_and_callers_reach_it(server, sign_in, watch_console):
    alice = watch_console(sign_in("alice"))
    before = orm(lambda: Agent.objects.filter(tenant__slug="acme").count())
    alice.goto("/console/t/acme/agents/")
    alice.get_by_role("link", name="Import agent").click()
    expect(alice.get_by_role("heading", name="Import a remote A2A agent")).to_be_visible()

    # Nothing listens there: a clear error on the field, not a 500.
    closed = f"http://127.0.0.1:{free_port()}/.well-known/agent-card.json"
    alice.get_by_label("Agent card URL").fill(closed)
    alice.get_by_role("button", name="Fetch and preview").click()
    card_field = alice.locator(".field.has-error", has=alice.get_by_label("Agent card URL"))
    expect(card_field.get_by_role("alert")).to_contain_text(f"{closed} could not be reached")
    screenshot(alice, "agent-import-unreachable")
    # Something that answers JSON that is not a card.
    alice.get_by_label("Agent card URL").fill(f"{server.base_url}/healthz")
    alice.get_by_role("button", name="Fetch and preview").click()
    expect(card_field.get_by_role("alert")).to_contain_text("is not a usable A2A agent card")
    assert orm(lambda: Agent.objects.filter(tenant__slug="acme").count()) == before

    card_url = f"{server.agent_url('echo')}.well-known/agent-card.json"
    alice.get_by_label("Agent card URL").fill(card_url)
    alice.get_by_role("button", name="Fetch and preview").click()
    preview = alice.get_by_test_id("import-preview")
    expect(preview.get_by_role("heading", name="Hello World Agent")).to_be_visible()
    expect(preview).to_contain_text("Answers every message with the text it received")
    expect(preview).to_contain_text("Echo Bot")
    expect(preview.locator("table")).to_contain_text("JSONRPC")
    expect(preview.locator("table")).to_contain_text("HTTP+JSON")
    expect(alice.get_by_test_id("import-jsonrpc-url")).to_have_text(server.agent_url("echo"))
    # The slug is suggested from the card's name; the caller needs this tenant's credentials.
    assert alice.get_by_label("Slug").input_value().startswith("hello-world-agent")
    expect(alice.get_by_label("Visibility")).to_have_value("authenticated")
    screenshot(alice, "agent-import-preview")
    assert orm(lambda: Agent.objects.filter(tenant__slug="acme").count()) == before

    slug = f"imported-echo-{uuid.uuid4().hex[:6]}"
    alice.get_by_label("Slug").fill(slug)
    alice.get_by_role("button", name="Create proxy agent").click()
    expect(alice.locator(".flash")).to_contain_text("Agent Hello World Agent is imported")
    expect(alice.get_by_test_id("agent-status")).to_contain_text("Serving calls")
    screenshot(alice, "agent-imported")
    agent = orm(lambda: Agent.objects.get(tenant__slug="acme", slug=slug))
    assert agent.handler == "a2a_proxy"
    assert agent.config == {"url": server.agent_url("echo")}
    assert agent.visibility == Agent.Visibility.AUTHENTICATED
    assert [skill["name"] for skill in agent.skills] == ["Echo Bot"]
    assert orm(
        lambda: list(
            AuditEvent.objects.filter(tenant__slug="acme", target_id=slug).values_list("action", flat=True)
        )
    ) == ["agent.create"]

    # A caller with one of acme's tokens reaches the remote agent through the new one.
    url = server.agent_url(slug, tenant="acme")
    task = _call(url, "through the import", _token(server))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert (
        task.artifacts[0].parts[0].text == "Hello, World! I have received your request (through the import)"
    )
    # Without credentials: refused, as for any authenticated agent.
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {"role": "ROLE_USER", "messageId": f"msg-{uuid.uuid4()}", "parts": [{"text": "hi"}]}
        },
    }
    refused = httpx.post(url, json=body, headers={"A2A-Version": "1.0"}, timeout=30)
    assert refused.status_code == 401

    # The agents list shows it serving.
    alice.goto("/console/t/acme/agents/")
    row = alice.locator("tr", has=alice.get_by_role("link", name="Hello World Agent")).filter(has_text=slug)
    expect(row.get_by_test_id("agent-status")).to_have_text("Serving calls")


def test_only_owners_may_import(server, sign_in, watch_console):
    bob = watch_console(sign_in("bob"))
    bob.goto("/console/t/acme/agents/")
    expect(bob.get_by_role("link", name="Import agent")).to_have_count(0)
    answer = bob.request.get("/console/t/acme/agents/import/")
    assert answer.status == 403
