"""Who may do what in the console. Its views fetch a tenant's rows through the apps' access modules.

A user sees a tenant through a Membership; platform superusers see every
tenant as owners. A tenant the user may not open answers 404, like a missing
one, so the console never confirms that another tenant exists.
"""

from dataclasses import dataclass
from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseBadRequest

from tenants.access import get_membership, get_tenant, role_allows
from tenants.models import Membership, Tenant

Role = Membership.Role


@dataclass(frozen=True)
class ConsoleAccess:
    tenant: Tenant
    role: str
    # Superusers without a membership: shown as such in the header.
    platform_admin: bool = False

    def allows(self, role: str) -> bool:
        return role_allows(self.role, role)

    @property
    def can_operate(self) -> bool:
        return self.allows(Role.OPERATOR)

    @property
    def can_admin(self) -> bool:
        return self.allows(Role.OWNER)


def console_access(user, tenant_slug: str) -> ConsoleAccess | None:
    """The user's access to one tenant, or None (not signed in, not a member, no such tenant)."""
    if not user.is_authenticated or not user.is_active:
        return None
    membership = get_membership(user, tenant_slug)
    if membership is not None:
        return ConsoleAccess(tenant=membership.tenant, role=membership.role)
    if user.is_superuser:
        tenant = get_tenant(tenant_slug)
        if tenant is not None:
            return ConsoleAccess(tenant=tenant, role=Role.OWNER, platform_admin=True)
    return None


def console_tenants(user) -> list[Tenant]:
    """Tenants the user may open, for the switcher."""
    if user.is_superuser:
        return list(Tenant.objects.order_by("slug"))
    return list(Tenant.objects.filter(memberships__user=user).order_by("slug"))


def _has_nul(request) -> bool:
    """Whether the path, a query value or a form value holds NUL.

    PostgreSQL stores no NUL in text or JSON: a filter, an id or an answer
    holding one would fail in the database (a 500) instead of being refused.
    """
    sent = [request.GET, request.POST] if request.method == "POST" else [request.GET]
    values = [request.path, *(text for data in sent for key, vs in data.lists() for text in (key, *vs))]
    return any("\x00" in value for value in values)


def tenant_view(role: str = Role.VIEWER):
    """Resolve `tenant` from the URL into request.console, or refuse.

    Signed out: to the sign-in page. Not a member: 404. A member whose role is
    too low: 403 (they know the tenant; they may not do this).
    """

    def decorator(view):
        @wraps(view)
        def wrapped(request, tenant, *args, **kwargs):
            if _has_nul(request):
                return HttpResponseBadRequest("The request holds a NUL character: nothing here can hold one.")
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            access = console_access(request.user, tenant)
            if access is None:
                raise Http404("No such tenant")
            if not access.allows(role):
                raise PermissionDenied(f"This needs the {role} role")
            request.console = access
            return view(request, *args, **kwargs)

        return wrapped

    return decorator
