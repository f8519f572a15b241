"""Access helpers: the only way to fetch a tenant's agent by its slug.

Each answers None for an agent that does not exist or belongs to another
tenant, so callers cannot tell those cases apart.
"""

import functools

from agents.models import Agent
from tenants import sql
from tenants.access import usable_id
from tenants.models import Tenant


def get_enabled_agent(tenant_slug: str, agent_slug: str) -> Agent | None:
    """The agent served at /a2a/<tenant>/<agent>/, with its tenant, or None if it is missing or disabled."""
    if not can_name_agent(tenant_slug, agent_slug):
        return None
    # Every A2A request starts here: one hand-written statement (tenants/sql.py).
    select, joins, where = enabled_agent_sql()
    params = enabled_agent_params(tenant_slug, agent_slug)
    row = sql.fetch_one(f"SELECT {select} {joins} WHERE {where}", params)
    return enabled_agent_of(row) if row is not None else None


def can_name_agent(tenant_slug: str, agent_slug: str) -> bool:
    """Whether the URL's segments may be looked up at all (any segment reaches the bindings' views)."""
    return usable_id(tenant_slug) and usable_id(agent_slug)


@functools.cache
def enabled_agent_sql() -> tuple[str, str, str]:
    """get_enabled_agent's statement as (columns, FROM clause, WHERE condition).

    For a statement that reads more with the agent (tasks_app.access.get_agent_and_task):
    the agent's (ag) and its tenant's (tn) columns come first; the parameters are
    enabled_agent_params.
    """
    return (
        f"{sql.columns(Agent, 'ag')}, {sql.columns(Tenant, 'tn')}",
        f"FROM {sql.table(Agent)} ag JOIN {sql.table(Tenant)} tn ON tn.id = ag.tenant_id",
        "tn.slug = %s AND ag.slug = %s AND ag.enabled = %s",
    )


def enabled_agent_params(tenant_slug: str, agent_slug: str) -> list:
    return [tenant_slug, agent_slug, True]


def enabled_agent_of(row) -> Agent:
    """The agent, with its tenant, of a row whose first columns are enabled_agent_sql()'s."""
    agent, tenant = sql.hydrate_all(row, Agent, Tenant)
    agent.tenant = tenant
    return agent


def get_agent_for_tenant(tenant: Tenant, slug: str) -> Agent | None:
    """One agent of the tenant, enabled or not (the API, the console, the commands)."""
    if not usable_id(slug):
        return None
    return Agent.objects.select_related("tenant").filter(tenant=tenant, slug=slug).first()
