from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from a2a_platform.console.access import Role, tenant_view
from a2a_platform.console.forms import ClientForm
from a2a_platform.console.views.base import actor, render_console
from tenants.models import Application
from tenants.services import oauth_client_create, oauth_client_revoke


@require_GET
@tenant_view(Role.OWNER)
def client_list(request):
    clients = request.console.tenant.oauth_clients.order_by("-created", "pk")
    return render_console(request, "console/clients/list.html", {"clients": clients})


@require_http_methods(["GET", "POST"])
@tenant_view(Role.OWNER)
def client_new(request):
    form = ClientForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        client, secret = oauth_client_create(
            tenant=request.console.tenant,
            actor=actor(request),
            name=form.cleaned_data["name"],
            scopes=form.cleaned_data["scopes"],
        )
        # The secret is stored hashed: this response is the only place it ever appears.
        response = render_console(
            request, "console/clients/created.html", {"client": client, "secret": secret}, status=201
        )
        add_never_cache_headers(response)
        return response
    return render_console(request, "console/clients/form.html", {"form": form})


@require_POST
@tenant_view(Role.OWNER)
def client_revoke_view(request, client_id: str):
    client = Application.objects.filter(tenant=request.console.tenant, client_id=client_id).first()
    if client is None:
        raise Http404("No such client")
    if client.revoked_at is None:
        oauth_client_revoke(client=client, actor=actor(request))
        messages.success(request, f"Client {client.name} is revoked; its tokens no longer work.")
    return redirect("console:clients", tenant=request.console.tenant.slug)
