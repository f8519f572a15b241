"""Importing a remote A2A agent from its card: the management API, and the card reading behind it.

The console's page is in tests/console/test_agent_import.py; both call agents.services.agent_import.
"""

import json
import uuid

import httpx
import pytest
from django.test import override_settings

from agents.models import Agent
from agents.remote_cards import CardUnavailable, card_parse
from tests.api import tenancy
from tests.api.test_api_isolation import call
from tests.live import free_port

trio = tenancy.trio

CARD_V03 = {
    "protocolVersion": "0.3.0",
    "name": "Old Timer",
    "description": "A 0.3 agent",
    "url": "https://8.8.8.8/rpc",
    "preferredTransport": "JSONRPC",
    "additionalInterfaces": [{"url": "https://8.8.8.8/rest", "transport": "HTTP+JSON"}],
    "version": "2.1.0",
    "capabilities": {"streaming": True},
    "defaultInputModes": ["text/plain"],
    "defaultOutputModes": ["text/plain"],
    "skills": [{"id": "chat", "name": "Chat", "description": "Talks", "tags": ["chat"]}],
}


def test_it_imports_the_remote_agent_as_a_proxy_behind_the_tenants_credentials(trio):
    alice = trio.token("acme", user="alice")
    slug = f"imported-{uuid.uuid4().hex[:8]}"
    # The older card path: the card URL is kept in the config, the proxy calls the JSON-RPC URL.
    card_url = f"{trio.base_url}/a2a/demo/echo/.well-known/agent.json"
    answer = call(trio, "POST", "acme", "agents/import/", alice, {"card_url": card_url, "slug": slug})
    assert answer.status_code == 201, answer.text
    body = answer.json()
    assert (body["handler"], body["name"], body["visibility"]) == (
        "a2a_proxy",
        "Hello World Agent",
        "authenticated",
    )
    assert body["config"] == {"url": f"{trio.base_url}/a2a/demo/echo/", "card_url": card_url}
    assert [skill["id"] for skill in body["skills"]] == ["echo_bot"]

    # A caller with an acme token reaches the echo agent through it.
    sent = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {"role": "ROLE_USER", "messageId": f"m-{uuid.uuid4()}", "parts": [{"text": "x"}]}
        },
    }
    result = httpx.post(
        f"{trio.base_url}/a2a/acme/{slug}/",
        json=sent,
        headers={"A2A-Version": "1.0", **trio.auth(trio.token("acme"))},
        timeout=60,
    ).json()["result"]["task"]
    assert result["status"]["state"] == "TASK_STATE_COMPLETED", result


def test_an_unreachable_card_is_a_400_on_card_url_and_stores_nothing(trio):
    alice = trio.token("acme", user="alice")
    slug = f"nowhere-{uuid.uuid4().hex[:8]}"
    closed = f"http://127.0.0.1:{free_port()}/.well-known/agent-card.json"
    answer = call(trio, "POST", "acme", "agents/import/", alice, {"card_url": closed, "slug": slug})
    assert answer.status_code == 400
    assert answer.json()["card_url"][0].startswith(f"{closed} could not be reached")
    not_a_card = call(
        trio, "POST", "acme", "agents/import/", alice, {"card_url": f"{trio.base_url}/healthz", "slug": slug}
    )
    assert not_a_card.status_code == 400 and "not a usable A2A agent card" in not_a_card.json()["card_url"][0]
    assert not Agent.objects.filter(tenant__slug="acme", slug=slug).exists()


def test_charlie_cannot_import_into_acme(trio):
    charlie = trio.token("globex", user="charlie")
    card_url = f"{trio.base_url}/a2a/demo/echo/.well-known/agent-card.json"
    answer = call(trio, "POST", "acme", "agents/import/", charlie, {"card_url": card_url, "slug": "sneaky"})
    assert answer.status_code == 404
    assert not Agent.objects.filter(tenant__slug="acme", slug="sneaky").exists()


def test_the_handler_list_carries_each_handlers_schema_and_defaults(trio):
    handlers = {
        h["name"]: h for h in call(trio, "GET", "acme", "handlers/", trio.token("acme", user="alice")).json()
    }
    progress = handlers["progress"]
    assert progress["title"] == "Long-running job (streaming)"
    assert progress["config_schema"]["properties"]["duration"]["maximum"] == 60
    assert progress["config_schema"]["additionalProperties"] is False
    assert progress["default_config"] == {"duration": 3.0}
    assert handlers["a2a_proxy"]["config_schema"]["required"] == ["url"]
    assert handlers["echo"]["default_skills"][0]["id"] == "echo_bot"
    # A handler that declares no schema takes any JSON object.
    assert handlers["silent"]["config_schema"] is None


def test_a_0_3_card_is_read_and_its_json_rpc_interface_chosen():
    remote = card_parse(json.dumps(CARD_V03).encode())
    assert remote.card.name == "Old Timer"
    assert remote.jsonrpc_url == "https://8.8.8.8/rpc"
    assert [i["protocolBinding"] for i in remote.data["supportedInterfaces"]] == ["JSONRPC", "HTTP+JSON"]
    assert remote.data["skills"][0]["name"] == "Chat"


def test_a_card_pointing_at_the_platforms_own_network_is_refused():
    card = {**CARD_V03, "url": "http://169.254.169.254/latest/", "additionalInterfaces": []}
    with pytest.raises(CardUnavailable, match="interface http://169.254.169.254/latest/ is refused"):
        card_parse(json.dumps(card).encode())
    with override_settings(DEBUG=False, PROXY_ALLOW_PRIVATE_NETWORKS=False):
        local = {**CARD_V03, "url": "http://127.0.0.1:8000/a2a/demo/echo/", "additionalInterfaces": []}
        with pytest.raises(CardUnavailable, match="unless PROXY_ALLOW_PRIVATE_NETWORKS=true is set"):
            card_parse(json.dumps(local).encode())
    with pytest.raises(CardUnavailable, match="did not answer with JSON"):
        card_parse(b"<html>")
    with pytest.raises(CardUnavailable, match="did not answer with JSON"):
        card_parse(b"[" * 5000)  # nested too deep for json.loads: a RecursionError
