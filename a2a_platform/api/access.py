"""Who is calling the management API, and what they may do in one tenant.

A person (session, or an interactive OAuth2 token) acts with the role of their
membership. A program (client-credentials token) acts as an admin of its own
tenant, but cannot mint credentials, change members or act on tasks: those
need a person, so every credential change and operator action has one behind it.
Tokens need the `agents:manage` scope. Any tenant the principal has no access
to answers 404, like a tenant that does not exist.
"""

from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser
from oauth2_provider.models import AccessToken
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.permissions import BasePermission

from tenants.access import get_membership, role_allows
from tenants.models import Membership, Tenant

MANAGE_SCOPE = "agents:manage"


@dataclass(frozen=True)
class Admin:
    tenant: Tenant
    role: str
    # "user:<username>" or "client:<client_id>", as the audit log records it.
    actor: str
    # None for a program's token.
    user: AbstractBaseUser | None = None

    def has_role(self, role: str) -> bool:
        return role_allows(self.role, role)


def request_token(request) -> AccessToken | None:
    return request.auth if isinstance(request.auth, AccessToken) else None


class IsAuthenticatedPrincipal(BasePermission):
    """A valid token (with or without a user) or a logged-in session."""

    def has_permission(self, request, view) -> bool:
        if request_token(request) is not None:
            return True
        return bool(request.user and request.user.is_authenticated)


def _not_found() -> NotFound:
    return NotFound()


def admin_resolve(request, tenant_slug: str) -> Admin:
    """The Admin acting in tenant `tenant_slug`; NotFound if they have no access to it."""
    token = request_token(request)
    if token is not None:
        client = token.application
        if client is None or client.tenant.slug != tenant_slug:
            raise _not_found()
        if MANAGE_SCOPE not in token.scope.split():
            raise PermissionDenied(f"The management API needs the '{MANAGE_SCOPE}' scope")
        if token.user_id is None:
            return Admin(tenant=client.tenant, role=Membership.Role.OWNER, actor=f"client:{client.client_id}")
        user = token.user
    else:
        user = request.user
    membership = get_membership(user, tenant_slug)
    if membership is None:
        raise _not_found()
    return Admin(tenant=membership.tenant, role=membership.role, actor=f"user:{user.username}", user=user)


def tenants_of(request) -> list[tuple[Tenant, str]]:
    """The tenants the principal can manage, with its role in each."""
    token = request_token(request)
    if token is not None and token.user_id is None:
        if token.application is None or MANAGE_SCOPE not in token.scope.split():
            return []
        return [(token.application.tenant, Membership.Role.OWNER)]
    user = token.user if token is not None else request.user
    memberships = Membership.objects.select_related("tenant").filter(user=user).order_by("tenant__slug")
    if token is not None:
        # An interactive token is bound to its client's tenant, whatever else its person belongs to.
        if MANAGE_SCOPE not in token.scope.split() or token.application is None:
            return []
        memberships = memberships.filter(tenant_id=token.application.tenant_id)
    return [(m.tenant, m.role) for m in memberships]
