from agents.models import Agent


def get_enabled_agent(tenant_slug: str, agent_slug: str) -> Agent | None:
    """The agent served at /a2a/<tenant>/<agent>/, or None if it is missing or disabled."""
    return (
        Agent.objects.select_related("tenant")
        .filter(tenant__slug=tenant_slug, slug=agent_slug, enabled=True)
        .first()
    )
