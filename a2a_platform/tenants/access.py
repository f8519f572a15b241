"""Tenant lookups. Every request path resolves its tenant through here."""

from a2a_platform.tenants.models import Application, Membership, Tenant


def get_tenant(slug: str) -> Tenant | None:
    return Tenant.objects.filter(slug=slug).first()


# --- A tenant's rows by id, for the management API and the commands ---------------
# Each answers None for a row of another tenant, exactly as for a missing one.


def _usable_id(value: str) -> bool:
    # PostgreSQL refuses NUL in text: such an id cannot exist, and must not become a 500.
    return bool(value) and "\x00" not in value and len(value) <= 255


def get_agent_for_tenant(tenant: Tenant, slug: str):
    from agents.models import Agent

    if not _usable_id(slug):
        return None
    return Agent.objects.select_related("tenant").filter(tenant=tenant, slug=slug).first()


def get_task_for_tenant(tenant: Tenant, task_id: str):
    from tasks_app.access import parse_task_uuid
    from tasks_app.models import Task

    pk = parse_task_uuid(task_id) if _usable_id(task_id) else None
    if pk is None:
        return None
    return Task.objects.select_related("tenant", "agent", "context").filter(tenant=tenant, pk=pk).first()


def get_oauth_client_for_tenant(tenant: Tenant, client_id: str) -> Application | None:
    if not _usable_id(client_id):
        return None
    return Application.objects.select_related("tenant").filter(tenant=tenant, client_id=client_id).first()


def get_membership_for_tenant(tenant: Tenant, username: str) -> Membership | None:
    if not _usable_id(username):
        return None
    return (
        Membership.objects.select_related("tenant", "user")
        .filter(tenant=tenant, user__username=username)
        .first()
    )
