"""Hostile bodies on the management API: a 400 with a JSON reason, never a 500, nothing stored."""

import uuid

import httpx
import pytest

from agents.models import Agent
from tests.api import tenancy

trio = tenancy.trio


def nested(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


def post_raw(trio, path: str, token: str, content: str) -> httpx.Response:
    return httpx.post(
        f"{trio.base_url}/api/v1/tenants/acme/{path}",
        content=content.encode(),
        headers={**trio.auth(token), "Content-Type": "application/json"},
        timeout=30,
    )


@pytest.mark.parametrize(
    "field, depth",
    [
        ("config", 100_000),  # beyond what the JSON parser takes
        ("config", 900),  # within it, beyond what the checks after it take
        ("skills", 900),
    ],
)
def test_it_refuses_json_nested_too_deeply_with_a_400(trio, field, depth):
    alice = trio.token("acme", user="alice")
    slug = f"deep-{uuid.uuid4().hex[:8]}"
    value = nested(depth) if field == "config" else f'[{{"id": "s", "extendedOnly": {nested(depth)}}}]'
    body = f'{{"slug": "{slug}", "handler": "echo", "visibility": "authenticated", "{field}": {value}}}'
    answer = post_raw(trio, "agents/", alice, body)
    assert answer.status_code == 400, answer.text[:300]
    assert "nested" in answer.json()["detail"]
    assert not Agent.objects.filter(slug=slug).exists()


def test_it_refuses_a_deeply_nested_answer_with_a_400(trio):
    bob = trio.token("acme", user="bob")
    answer = post_raw(trio, f"tasks/{uuid.uuid4()}/answer/", bob, f'{{"text": {nested(100_000)}}}')
    assert answer.status_code == 400, answer.text[:300]
    assert "nested" in answer.json()["detail"]


def test_a_post_to_a_url_without_its_trailing_slash_is_not_found_not_a_500(trio):
    alice = trio.token("acme", user="alice")
    slug = f"noslash-{uuid.uuid4().hex[:8]}"
    answer = httpx.post(
        f"{trio.base_url}/api/v1/tenants/acme/agents",
        json={"slug": slug, "handler": "echo", "visibility": "authenticated"},
        headers=trio.auth(alice),
        timeout=30,
    )
    assert answer.status_code == 404, answer.text[:300]
    assert not Agent.objects.filter(slug=slug).exists()
