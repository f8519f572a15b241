"""Who may do what in the console, and the only way its views fetch a tenant's rows.

A user sees a tenant through a Membership; platform superusers see every
tenant as owners. A tenant the user may not open answers 404, like a missing
one, so the console never confirms that another tenant exists.
"""

from dataclasses import dataclass
from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404

from a2a_platform.tenants.models import Membership, Tenant
from agents.models import Agent
from tasks_app.access import parse_task_uuid
from tasks_app.models import Task

Role = Membership.Role
RANK = {Role.VIEWER: 0, Role.OPERATOR: 1, Role.OWNER: 2}


@dataclass(frozen=True)
class ConsoleAccess:
    tenant: Tenant
    role: str
    # Superusers without a membership: shown as such in the header.
    platform_admin: bool = False

    def allows(self, role: str) -> bool:
        return RANK[self.role] >= RANK[role]

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
    membership = (
        Membership.objects.select_related("tenant").filter(user=user, tenant__slug=tenant_slug).first()
    )
    if membership is not None:
        return ConsoleAccess(tenant=membership.tenant, role=membership.role)
    if user.is_superuser:
        tenant = Tenant.objects.filter(slug=tenant_slug).first()
        if tenant is not None:
            return ConsoleAccess(tenant=tenant, role=Role.OWNER, platform_admin=True)
    return None


def console_tenants(user) -> list[Tenant]:
    """Tenants the user may open, for the switcher."""
    if user.is_superuser:
        return list(Tenant.objects.order_by("slug"))
    return list(Tenant.objects.filter(memberships__user=user).order_by("slug"))


def tenant_view(role: str = Role.VIEWER):
    """Resolve `tenant` from the URL into request.console, or refuse.

    Signed out: to the sign-in page. Not a member: 404. A member whose role is
    too low: 403 (they know the tenant; they may not do this).
    """

    def decorator(view):
        @wraps(view)
        def wrapped(request, tenant, *args, **kwargs):
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


def get_task_for_tenant(tenant: Tenant, task_id, *, for_update: bool = False) -> Task | None:
    """One task of the tenant by its public id, or None (bad id, missing, another tenant's)."""
    pk = parse_task_uuid(task_id)
    if pk is None:
        return None
    tasks = Task.objects.filter(tenant=tenant, pk=pk)
    if for_update:
        tasks = tasks.select_for_update(of=("self",))
    return tasks.select_related("agent", "context", "status_message", "tenant").first()


def get_agent_for_tenant(tenant: Tenant, slug: str) -> Agent | None:
    return Agent.objects.filter(tenant=tenant, slug=slug).select_related("tenant").first()
