"""Tenant lookups: every request path resolves its tenant, and a member's role in it, through here.

The access helpers of a tenant's rows by id live with their entity
(agents/access.py, tasks_app/access.py); each answers None for a row of
another tenant, exactly as for a missing one.
"""

from importlib import import_module

from django.conf import settings
from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY
from django.utils.crypto import constant_time_compare

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


def session_holds(session_key: str, user) -> bool:
    """Whether the session is still this user's sign-in, as Django checks it on each request.

    For connections that outlive the request that opened them (the console's
    feed, A2A streams). Signed out or expired, the stored session is gone (or
    holds no user); a password changed since leaves it a hash that no longer
    matches. Reads the store without changing it.
    """
    session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    if session.get(SESSION_KEY) != str(user.pk):
        return False
    given = session.get(HASH_SESSION_KEY) or ""
    return any(
        constant_time_compare(given, known)
        for known in (user.get_session_auth_hash(), *user.get_session_auth_fallback_hash())
    )
