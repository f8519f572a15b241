import uuid

import pytest


def new_id() -> str:
    return f"msg-{uuid.uuid4()}"


@pytest.fixture
def demo_agent(stored):
    """Create (or reconfigure) a public agent of the demo tenant; returns its slug.

    Tests make their own agents rather than reconfigure the seeded ones, which
    other test files rely on as seeded.
    """
    from agents.models import Agent
    from tenants.models import Tenant

    def make(slug: str, handler: str, config: dict | None = None) -> str:
        Agent.objects.update_or_create(
            tenant=Tenant.objects.get(slug="demo"),
            slug=slug,
            defaults={
                "name": slug,
                "handler": handler,
                "config": config or {},
                "visibility": Agent.Visibility.PUBLIC,
                "enabled": True,
            },
        )
        return slug

    return make


def status_text(task: dict) -> str:
    """The text of a ProtoJSON task's current status message."""
    parts = task["status"].get("message", {}).get("parts", [])
    return "\n".join(part["text"] for part in parts if "text" in part)


def artifact_text(task: dict) -> str:
    return "\n".join(
        part["text"] for artifact in task.get("artifacts", []) for part in artifact["parts"] if "text" in part
    )
