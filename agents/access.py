"""Access helpers: the only way to fetch a tenant's agent by its slug.

Each answers None for an agent that does not exist or belongs to another
tenant, so callers cannot tell those cases apart.
"""

from agents.models import Agent
from tenants import sql
from tenants.access import usable_id
from tenants.models import Tenant


def get_enabled_agent(tenant_slug: str, agent_slug: str) -> Agent | None:
    """The agent served at /a2a/<tenant>/<agent>/, with its tenant, or None if it is missing or disabled."""
    # Every A2A request starts here: one hand-written statement (tenants/sql.py).
    row = sql.fetch_one(
        f"SELECT {sql.columns(Agent, 'a')}, {sql.columns(Tenant, 't')} "
        f"FROM {sql.table(Agent)} a JOIN {sql.table(Tenant)} t ON t.id = a.tenant_id "
        "WHERE t.slug = %s AND a.slug = %s AND a.enabled = %s",
        [tenant_slug, agent_slug, True],
    )
    if row is None:
        return None
    agent, tenant = sql.hydrate_all(row, Agent, Tenant)
    agent.tenant = tenant
    return agent


def get_agent_for_tenant(tenant: Tenant, slug: str) -> Agent | None:
    """One agent of the tenant, enabled or not (the API, the console, the commands)."""
    if not usable_id(slug):
        return None
    return Agent.objects.select_related("tenant").filter(tenant=tenant, slug=slug).first()
