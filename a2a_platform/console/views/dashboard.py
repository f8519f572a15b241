from django.conf import settings
from django.core.paginator import Paginator
from django.db.models import Count
from django.views.decorators.http import require_GET

from a2a_platform.console.access import Role, tenant_view
from a2a_platform.console.presenters import task_rows
from a2a_platform.console.views.base import render_console
from tasks_app.models import TaskState
from tasks_app.quotas import quota_usage
from tasks_app.selectors import tasks_matching, tenant_tasks

RECENT_FAILURES = 10


@require_GET
@tenant_view()
def dashboard(request):
    tenant = request.console.tenant
    by_state = dict(tenant.tasks.values_list("state").annotate(n=Count("pk")).order_by())
    failures = tasks_matching(tenant_tasks(tenant), state=TaskState.FAILED).order_by("-status_timestamp")
    failures = failures[:RECENT_FAILURES]
    return render_console(
        request,
        "console/dashboard.html",
        {
            "states": [(value, label, by_state.get(value, 0)) for value, label in TaskState.choices],
            "total": sum(by_state.values()),
            "failures": task_rows(failures),
            "agent_count": tenant.agents.count(),
            "usage": quota_usage(tenant),
        },
    )


@require_GET
@tenant_view(Role.OWNER)
def audit_log(request):
    events = request.console.tenant.audit_events.order_by("-created_at", "-pk")
    page = Paginator(events, settings.CONSOLE_PAGE_SIZE).get_page(request.GET.get("page"))
    return render_console(request, "console/audit.html", {"page": page})
