"""Tenant lookups: every request path resolves its tenant, and a member's role in it, through here.

The access helpers of a tenant's rows by id live with their entity
(agents/access.py, tasks_app/access.py); each answers None for a row of
another tenant, exactly as for a missing one.
"""

from tenants.models import Application, Membership, Tenant

# What each role may do includes everything the roles below it may.
ROLE_RANK = {Membership.Role.VIEWER: 0, Membership.Role.OPERATOR: 1, Membership.Role.OWNER: 2}


def role_allows(role: str, needed: str) -> bool:
    return ROLE_RANK[role] >= ROLE_RANK[needed]


def usable_id(value: str) -> bool:
    """Whether a public id or slug from a URL can name a row at all."""
    # PostgreSQL refuses NUL in text: such an id cannot exist, and must not become a 500.
    return bool(value) and "\x00" not in value and len(value) <= 255


def get_tenant(slug: str) -> Tenant | None:
    return Tenant.objects.filter(slug=slug).first()


def get_membership(user, tenant_slug: str) -> Membership | None:
    """The user's membership of the tenant `tenant_slug`, with the tenant, or None."""
    return Membership.objects.select_related("tenant").filter(user=user, tenant__slug=tenant_slug).first()


def get_oauth_client_for_tenant(tenant: Tenant, client_id: str) -> Application | None:
    if not usable_id(client_id):
        return None
    return Application.objects.select_related("tenant").filter(tenant=tenant, client_id=client_id).first()


def get_membership_for_tenant(tenant: Tenant, username: str) -> Membership | None:
    if not usable_id(username):
        return None
    return (
        Membership.objects.select_related("tenant", "user")
        .filter(tenant=tenant, user__username=username)
        .first()
    )
