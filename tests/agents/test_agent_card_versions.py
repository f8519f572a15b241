"""The agent card a request gets depends on its A2A-Version: exactly the 1.0 schema for 1.x,
today's superset (1.0 plus the 0.3 top-level fields) for 0.3 clients that name no version.

Validated with jsonschema against the specification's own JSON Schema bundle
(tests/schemas/, see its README for where it comes from)."""

import json
import uuid
from pathlib import Path

import httpx
import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from a2a_platform.seed import DEMO_AGENTS
from tests.api import tenancy

trio = tenancy.trio

SCHEMA = json.loads((Path(__file__).parent.parent / "schemas" / "a2a-1.0-agent-card.json").read_text())
# What the proto marks (google.api.field_behavior) = REQUIRED; the generated bundle has no `required`.
REQUIRED = {
    "card": {
        "name",
        "description",
        "supportedInterfaces",
        "version",
        "capabilities",
        "defaultInputModes",
        "defaultOutputModes",
        "skills",
    },
    "interface": {"url", "protocolBinding", "protocolVersion"},
    "skill": {"id", "name", "description", "tags"},
}
V03_ONLY = {"url", "preferredTransport", "protocolVersion", "supportsAuthenticatedExtendedCard"}


def _registry() -> Registry:
    """Each definition under the file name the bundle's $refs use: lf.a2a.v1.<Title without spaces>..."""
    resources = []
    for title, definition in SCHEMA["definitions"].items():
        package = "google.protobuf" if title in ("Struct", "Timestamp", "Value") else "lf.a2a.v1"
        uri = f"{package}.{title.replace(' ', '')}.jsonschema.json"
        resources.append((uri, Resource.from_contents(definition)))
    return Registry().with_resources(resources)


VALIDATOR = Draft202012Validator(SCHEMA["definitions"]["Agent Card"], registry=_registry())


def assert_exact_1_0_card(card: dict) -> None:
    errors = sorted(VALIDATOR.iter_errors(card), key=lambda error: error.path)
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]
    assert REQUIRED["card"] <= set(card), REQUIRED["card"] - set(card)
    for interface in card["supportedInterfaces"]:
        assert REQUIRED["interface"] <= set(interface)
    for skill in card["skills"]:
        assert REQUIRED["skill"] <= set(skill)
    assert not V03_ONLY & set(card)


def card_url(server, slug: str, tenant: str = "demo") -> str:
    return server.agent_url(slug, tenant) + ".well-known/agent-card.json"


@pytest.fixture
def skill_less_agent(stored) -> str:
    """An agent whose handler suggests no skills and which lists none itself."""
    from agents.models import Agent
    from tenants.models import Tenant

    slug = "no-skills"
    Agent.objects.update_or_create(
        tenant=Tenant.objects.get(slug="demo"),
        slug=slug,
        defaults={"name": "No skills", "handler": "silent", "skills": [], "enabled": True},
    )
    return slug


def test_the_schema_refuses_what_the_platform_served_before(server):
    # The check can fail: today's superset breaks the 1.0 schema (no top-level url and friends).
    superset = httpx.get(card_url(server, "echo")).json()
    assert not VALIDATOR.is_valid(superset)
    exact = httpx.get(card_url(server, "echo"), headers={"A2A-Version": "1.0"}).json()
    assert VALIDATOR.is_valid(exact)
    assert not VALIDATOR.is_valid({**exact, "protocolVersion": "0.3"})


@pytest.mark.parametrize("slug", [slug for slug, *_ in DEMO_AGENTS])
def test_every_demo_agent_card_is_exactly_1_0_when_asked_by_header(server, slug):
    answer = httpx.get(card_url(server, slug), headers={"A2A-Version": "1.0"})
    assert answer.status_code == 200
    assert "A2A-Version" in answer.headers["Vary"]
    assert_exact_1_0_card(answer.json())


def test_the_query_parameter_asks_for_1_0_too(server):
    answer = httpx.get(card_url(server, "approval"), params={"A2A-Version": "1.0"})
    assert_exact_1_0_card(answer.json())


def test_an_agent_without_skills_has_an_empty_skills_list(server, skill_less_agent):
    card = httpx.get(card_url(server, skill_less_agent), headers={"A2A-Version": "1.0"}).json()
    assert card["skills"] == []
    assert_exact_1_0_card(card)
    # 0.3 requires skills too: the superset keeps the empty list.
    assert httpx.get(card_url(server, skill_less_agent)).json()["skills"] == []


def test_a_request_without_a_version_keeps_the_0_3_superset(server):
    card = httpx.get(card_url(server, "secure-echo")).json()
    assert card["url"] == server.agent_url("secure-echo")
    assert card["preferredTransport"] == "JSONRPC" and card["protocolVersion"] == "0.3"
    assert card["supportsAuthenticatedExtendedCard"] is True
    assert card["supportedInterfaces"][0]["protocolVersion"] == "1.0"
    explicit = httpx.get(card_url(server, "secure-echo"), headers={"A2A-Version": "0.3"}).json()
    assert explicit == card


def test_the_two_versions_are_cached_apart(server):
    url = card_url(server, "echo")
    old, new = httpx.get(url), httpx.get(url, headers={"A2A-Version": "1.0"})
    assert old.headers["ETag"] != new.headers["ETag"]
    # A 0.3 client's tag does not revalidate the 1.0 card.
    stale = httpx.get(url, headers={"A2A-Version": "1.0", "If-None-Match": old.headers["ETag"]})
    assert stale.status_code == 200
    fresh = httpx.get(url, headers={"A2A-Version": "1.0", "If-None-Match": new.headers["ETag"]})
    assert fresh.status_code == 304


def test_an_unsupported_version_is_refused_with_400(server):
    answer = httpx.get(card_url(server, "echo"), headers={"A2A-Version": "2.0"})
    assert answer.status_code == 400
    assert "1.0" in answer.json()["error"]
    assert httpx.get(f"{server.base_url}/a2a/demo/", params={"A2A-Version": "9"}).status_code == 400


def test_the_tenant_catalog_serves_1_0_cards_on_request(server):
    catalog = httpx.get(f"{server.base_url}/a2a/demo/", headers={"A2A-Version": "1.0"}).json()
    assert {card["name"] for card in catalog["agents"]} >= {name for _, name, *_ in DEMO_AGENTS}
    for card in catalog["agents"]:
        assert_exact_1_0_card(card)


def test_the_extended_card_of_get_extended_agent_card_is_exactly_1_0(trio):
    answer = httpx.post(
        f"{trio.base_url}/a2a/acme/vault/",
        json={"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": "GetExtendedAgentCard", "params": {}},
        headers={"A2A-Version": "1.0", **trio.auth(trio.token("acme"))},
        timeout=30,
    ).json()
    card = answer["result"]
    assert card["name"] == "Vault" and "securitySchemes" in card
    assert_exact_1_0_card(card)
    # Someone else's tenant still learns nothing from it.
    refused = httpx.post(
        f"{trio.base_url}/a2a/acme/vault/",
        json={"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "params": {}},
        headers={"A2A-Version": "1.0", **trio.auth(trio.token("globex"))},
        timeout=30,
    )
    assert refused.status_code == 401
