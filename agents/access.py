"""Access helpers: the only way to fetch a tenant's agent by its slug.

Each answers None for an agent that does not exist or belongs to another
tenant, so callers cannot tell those cases apart.
"""

from agents.models import Agent
from tenants.access import usable_id
from tenants.models import Tenant


def get_enabled_agent(tenant_slug: str, agent_slug: str) -> Agent | None:
    """The agent served at /a2a/<tenant>/<agent>/, or None if it is missing or disabled."""
    return (
        Agent.objects.select_related("tenant")
        .filter(tenant__slug=tenant_slug, slug=agent_slug, enabled=True)
        .first()
    )


def get_agent_for_tenant(tenant: Tenant, slug: str) -> Agent | None:
    """One agent of the tenant, enabled or not (the API, the console, the commands)."""
    if not usable_id(slug):
        return None
    return Agent.objects.select_related("tenant").filter(tenant=tenant, slug=slug).first()
