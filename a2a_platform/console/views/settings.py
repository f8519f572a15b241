from django.contrib import messages
from django.shortcuts import redirect
from django.views.decorators.http import require_http_methods

from a2a_platform.console.access import Role, tenant_view
from a2a_platform.console.forms import TenantSettingsForm
from a2a_platform.console.views.base import actor, render_console
from tenants.models import LIMIT_FIELDS
from tenants.services import tenant_settings_update


@require_http_methods(["GET", "POST"])
@tenant_view(Role.OWNER)
def tenant_settings(request):
    tenant = request.console.tenant
    form = TenantSettingsForm(
        request.POST or None, initial={name: getattr(tenant, name) for name in LIMIT_FIELDS}
    )
    if request.method == "POST" and form.is_valid():
        tenant_settings_update(tenant=tenant, actor=actor(request), **form.cleaned_data)
        messages.success(request, "Settings saved.")
        return redirect("console:settings", tenant=tenant.slug)
    return render_console(request, "console/settings.html", {"form": form})
