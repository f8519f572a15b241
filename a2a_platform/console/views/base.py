"""What every console page needs: the header's tenants and queue sizes, and the assets."""

import hashlib
from functools import cache
from pathlib import Path

from django.contrib.auth.decorators import login_required
from django.db.models import Count
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.cache import patch_cache_control
from django.views.decorators.http import require_GET

from a2a_platform.console.access import console_tenants
from tasks_app.models import Task, TaskState

ASSET_DIR = Path(__file__).resolve().parent.parent / "static" / "console"
ASSETS = {
    "console.css": "text/css",
    "console.js": "text/javascript",
    # The agent register/edit/import pages (templates/console/agents/).
    "agents.css": "text/css",
    "agents.js": "text/javascript",
    "favicon.svg": "image/svg+xml",
}


def queue_counts(tenant) -> dict[str, int]:
    rows = (
        Task.objects.filter(tenant=tenant, state__in=[TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED])
        .values("state")
        .annotate(n=Count("pk"))
    )
    counts = {row["state"]: row["n"] for row in rows}
    return {
        "input": counts.get(TaskState.INPUT_REQUIRED, 0),
        "auth": counts.get(TaskState.AUTH_REQUIRED, 0),
    }


def actor(request) -> str:
    """The audit log's name for the signed-in user."""
    return f"user:{request.user.username}"


def render_console(request, template: str, context: dict, status: int = 200) -> HttpResponse:
    access = request.console
    context = {
        "console": access,
        "tenant": access.tenant,
        "tenants": console_tenants(request.user),
        "queues": queue_counts(access.tenant),
        # The WebSocket route (routing.py) sits beside the dashboard URL.
        "feed_path": reverse("console:dashboard", args=[access.tenant.slug]) + "feed/",
        **context,
    }
    return render(request, template, context, status=status)


@login_required
def console_home(request):
    tenants = console_tenants(request.user)
    if len(tenants) == 1:
        return redirect("console:dashboard", tenant=tenants[0].slug)
    return render(request, "console/tenant_picker.html", {"tenants": tenants})


@cache
def _asset(name: str) -> tuple[bytes, str]:
    # Look the name up in ASSETS: only those files are served, under their plain-str names.
    name = next(known for known in ASSETS if known == name)
    body = (ASSET_DIR / name).read_bytes()
    return body, hashlib.sha256(body).hexdigest()[:16]


def asset_version(name: str) -> str:
    return _asset(name)[1]


@require_GET
def console_asset(request, name: str):
    """The console's own CSS and JS. Daphne serves no static files, so the console does."""
    if name not in ASSETS:
        raise Http404()
    body, digest = _asset(name)
    response = HttpResponse(body, content_type=f"{ASSETS[name]}; charset=utf-8")
    response["ETag"] = f'"{digest}"'
    # URLs carry ?v=<digest>, so a cached copy is never stale.
    patch_cache_control(response, public=True, max_age=86400)
    return response


@require_GET
def favicon(request):
    """/favicon.ico, which browsers ask every page for: the console's SVG icon."""
    return console_asset(request, "favicon.svg")
