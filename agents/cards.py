"""Agent cards, built from the Agent row and validated through a2a-sdk's AgentCard type."""

import hashlib
import json

from a2a.types import a2a_pb2 as pb
from django.conf import settings
from django.utils.http import http_date
from google.protobuf.json_format import MessageToDict, ParseDict

from agents.models import Agent
from agents.registry import handler_defaults


def public_base_url(request) -> str:
    """PUBLIC_BASE_URL if set, else the scheme, host and port the request came to."""
    return settings.PUBLIC_BASE_URL or f"{request.scheme}://{request.get_host()}"


def agent_url(agent: Agent, base_url: str) -> str:
    return f"{base_url}/a2a/{agent.tenant.slug}/{agent.slug}/"


def _skills(agent: Agent) -> list[dict]:
    skills = agent.skills or handler_defaults(agent.handler)["skills"]
    # A skill's tags are REQUIRED and must not be empty in the proto.
    return [{**skill, "tags": skill.get("tags") or [skill.get("id", "skill")]} for skill in skills]


def card_dict(agent: Agent, base_url: str) -> dict:
    url = agent_url(agent, base_url)
    description = agent.description or handler_defaults(agent.handler)["description"] or agent.name
    card = {
        "name": agent.name,
        "description": description,
        "supportedInterfaces": [
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        ],
        "provider": {"organization": agent.tenant.name, "url": base_url},
        "version": agent.version,
        "capabilities": {"streaming": True, "pushNotifications": False, "extendedAgentCard": False},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": _skills(agent),
    }
    # Round trip through the SDK type: a card we cannot parse must never be served.
    return MessageToDict(ParseDict(card, pb.AgentCard()), preserving_proto_field_name=False)


def card_cache_headers(card: dict, agent: Agent) -> dict[str, str]:
    digest = hashlib.sha256(json.dumps(card, sort_keys=True).encode()).hexdigest()[:32]
    return {
        "ETag": f'W/"{digest}"',
        "Last-Modified": http_date(agent.updated_at.timestamp()),
        "Cache-Control": f"public, max-age={settings.A2A_CARD_MAX_AGE}",
    }
