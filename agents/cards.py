"""Agent cards, built from the Agent row and validated through a2a-sdk's AgentCard type."""

import hashlib
import json
import re

from a2a.types import a2a_pb2 as pb
from django.conf import settings
from django.utils.http import http_date
from google.protobuf.json_format import MessageToDict, ParseDict

from agents.models import Agent
from agents.registry import handler_defaults

OAUTH_SCHEME = "oauth2"
OAUTH_INTERACTIVE_SCHEME = "oauth2-interactive"
# Skills marked this way in Agent.skills appear only on the extended card.
EXTENDED_ONLY = "extendedOnly"
# An A2A version as the spec writes one: Major.Minor ("1" and a patch taken too).
VERSION_RE = re.compile(r"([0-9]{1,9})(?:\.[0-9]{1,9}){0,2}")
# Safe retries of SendMessage (tasks_app/services.py message_send), declared as an extension.
IDEMPOTENCY_EXTENSION_URI = "https://datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header/"


def _idempotency_extension() -> dict:
    return {
        "uri": IDEMPOTENCY_EXTENSION_URI,
        "description": (
            "Send an Idempotency-Key header with SendMessage or SendStreamingMessage to retry safely: "
            "the same key, caller, agent and request within the key's lifetime answer with the task "
            "the first request started, and start no second turn; the same key with another request "
            "is refused (HTTP 422, JSON-RPC -32602). A repeated messageId alone is a new message."
        ),
        "required": False,
        "params": {
            "header": "Idempotency-Key",
            "methods": ["SendMessage", "SendStreamingMessage"],
            "ttlSeconds": int(settings.A2A_IDEMPOTENCY_TTL),
        },
    }


def public_base_url(request) -> str:
    """PUBLIC_BASE_URL if set, else the scheme, host and port the request came to."""
    return settings.PUBLIC_BASE_URL or f"{request.scheme}://{request.get_host()}"


def agent_url(agent: Agent, base_url: str) -> str:
    return f"{base_url}/a2a/{agent.tenant.slug}/{agent.slug}/"


def grpc_tenant(agent: Agent) -> str:
    """The `tenant` field that addresses `agent` on the gRPC binding, which serves every agent on one port."""
    return f"{agent.tenant.slug}/{agent.slug}"


def _skills(agent: Agent, extended: bool) -> list[dict]:
    skills = agent.skills or handler_defaults(agent.handler)["skills"]
    shown = []
    for skill in skills:
        if skill.get(EXTENDED_ONLY) and not extended:
            continue
        skill = {key: value for key, value in skill.items() if key != EXTENDED_ONLY}
        # A skill's tags are REQUIRED and must not be empty in the proto.
        skill["tags"] = skill.get("tags") or [skill.get("id", "skill")]
        shown.append(skill)
    return shown


def _security(base_url: str) -> tuple[dict, list[dict]]:
    scopes = settings.OAUTH2_PROVIDER["SCOPES"]
    a2a_scopes = {name: text for name, text in scopes.items() if name.startswith("a2a:")}
    schemes = {
        OAUTH_SCHEME: {
            "oauth2SecurityScheme": {
                "description": "OAuth2 client credentials of a client of this agent's tenant",
                "flows": {"clientCredentials": {"tokenUrl": f"{base_url}/o/token/", "scopes": a2a_scopes}},
            }
        },
        OAUTH_INTERACTIVE_SCHEME: {
            "oauth2SecurityScheme": {
                "description": "OAuth2 authorization code with PKCE, for interactive clients",
                "flows": {
                    "authorizationCode": {
                        "authorizationUrl": f"{base_url}/o/authorize/",
                        "tokenUrl": f"{base_url}/o/token/",
                        "scopes": a2a_scopes,
                        "pkceRequired": True,
                    }
                },
            }
        },
    }
    # Either scheme will do: each requirement entry is an alternative.
    requirements = [
        {"schemes": {OAUTH_SCHEME: {"list": ["a2a:invoke"]}}},
        {"schemes": {OAUTH_INTERACTIVE_SCHEME: {"list": ["a2a:invoke"]}}},
    ]
    return schemes, requirements


def requested_version(request) -> str:
    """The A2A-Version a request names: header, else query parameter; '' when it names none."""
    value = request.headers.get("A2A-Version") or request.GET.get("A2A-Version") or ""
    return value.strip()


def version_major(version: str) -> str | None:
    """The major of a version as the spec writes one, Major.Minor ("1.0"; "1" and a patch are
    taken too); None for anything else ("1.x", "abc"), which names no version to serve."""
    found = VERSION_RE.fullmatch(version)
    return found.group(1) if found else None


def card_version(request) -> str | None:
    """Which card a request gets: "1.0" (exactly the 1.0 schema), "0.3" (the superset), None if unsupported.

    No version means 0.3 (spec §3.6): those clients keep the superset they read today.
    """
    major = version_major(requested_version(request) or "0.3")
    return {"1": "1.0", "0": "0.3"}.get(major)


# What the 1.0 schema REQUIRES of a card (proto field_behavior), repeated or not.
REQUIRED_CARD_FIELDS = {
    "name": "",
    "description": "",
    "supportedInterfaces": [],
    "version": "",
    "capabilities": {},
    "defaultInputModes": [],
    "defaultOutputModes": [],
    "skills": [],
}


def card_dict(agent: Agent, base_url: str, *, extended: bool = False, version: str = "0.3") -> dict:
    """The agent's card in 1.0 ProtoJSON; for "0.3", plus the top-level fields 0.3 clients read.

    Every field 1.0 requires is present, empty or not (`skills: []` for an
    agent without skills): ProtoJSON would leave out an empty one.
    """
    url = agent_url(agent, base_url)
    tenant = agent.tenant.slug
    description = agent.description or handler_defaults(agent.handler)["description"] or agent.name
    card = {
        "name": agent.name,
        "description": description,
        # JSON-RPC first: it is the preferred interface. 1.0 clients send `tenant` on every call.
        "supportedInterfaces": [
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0", "tenant": tenant},
            {"url": url + "rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0", "tenant": tenant},
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        ],
        "provider": {"organization": agent.tenant.name, "url": base_url},
        "version": agent.version,
        "capabilities": {
            "streaming": True,
            "pushNotifications": True,
            # Only an authenticated agent has callers who can be shown more.
            "extendedAgentCard": not agent.is_public,
            "extensions": [_idempotency_extension()],
        },
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": _skills(agent, extended),
    }
    if settings.A2A_GRPC_PUBLIC_URL:
        # Last: JSON-RPC stays the preferred interface.
        card["supportedInterfaces"].append(
            {
                "url": settings.A2A_GRPC_PUBLIC_URL,
                "protocolBinding": "GRPC",
                "protocolVersion": "1.0",
                "tenant": grpc_tenant(agent),
            },
        )
    if not agent.is_public:
        card["securitySchemes"], card["securityRequirements"] = _security(base_url)
    # Round trip through the SDK type: a card we cannot parse must never be served.
    served = MessageToDict(ParseDict(card, pb.AgentCard()), preserving_proto_field_name=False)
    for name, empty in REQUIRED_CARD_FIELDS.items():
        served.setdefault(name, type(empty)())
    if version != "0.3":
        return served
    # What 0.3 clients read (as a2a-sdk's own card serializer adds them).
    served.update({"url": url, "preferredTransport": "JSONRPC", "protocolVersion": "0.3"})
    if not agent.is_public:
        served["supportsAuthenticatedExtendedCard"] = True
    return served


def card_last_modified(agent: Agent) -> int:
    """When the card last changed, in whole seconds (what Last-Modified can say)."""
    return int(agent.updated_at.timestamp())


def card_cache_headers(card: dict, agent: Agent) -> dict[str, str]:
    digest = hashlib.sha256(json.dumps(card, sort_keys=True).encode()).hexdigest()[:32]
    return {
        "ETag": f'W/"{digest}"',
        "Last-Modified": http_date(card_last_modified(agent)),
        "Cache-Control": f"public, max-age={settings.A2A_CARD_MAX_AGE}",
    }
