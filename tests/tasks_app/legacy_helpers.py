"""Plain-HTTP helpers for the 0.3 and draft dialect tests: no A2A-Version header, as old clients send."""

import json
import uuid

import httpx

from tasks_app.models import Context, Message, Task, TaskEvent


def post(
    server, method: str, params, *, agent: str = "echo", request_id="req-1", tenant: str = "demo"
) -> dict:
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    response = httpx.post(server.agent_url(agent, tenant), json=body, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json"), response.text
    return response.json()


def stream(
    server, method: str, params, *, agent: str = "echo", request_id="req-1", headers=None
) -> list[dict]:
    """POST a streaming call and read the SSE to its end: [{"id", "event", "data"}, ...]."""
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    sent = {"Content-Type": "application/json", **(headers or {})}
    timeout = httpx.Timeout(30, read=30)
    with httpx.stream("POST", server.agent_url(agent), json=body, headers=sent, timeout=timeout) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream"), response.read()
        return list(sse_events(response))


def sse_events(response: httpx.Response):
    event: dict = {}
    for line in response.iter_lines():
        if not line:
            if "data" in event:
                event["data"] = json.loads(event["data"])
                yield event
            event = {}
        elif not line.startswith(":"):
            field, _, value = line.partition(":")
            event[field] = value[1:] if value.startswith(" ") else value


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def stored_counts() -> tuple[int, ...]:
    return tuple(model.objects.count() for model in (Context, Task, Message, TaskEvent))


def other_tenant_echo():
    """A second tenant with its own public `echo` agent: same URL shape, different tenant."""
    from agents.models import Agent
    from tenants.models import Tenant

    tenant, _ = Tenant.objects.get_or_create(slug="globex", defaults={"name": "Globex"})
    Agent.objects.get_or_create(
        tenant=tenant,
        slug="echo",
        defaults={"name": "Globex echo", "handler": "echo", "visibility": Agent.Visibility.PUBLIC},
    )
    return tenant.slug
