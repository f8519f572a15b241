"""Task lists, the two operator queues, task detail and the operator actions."""

import base64
import binascii
import re

from django.apps import apps
from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from a2a_platform.console.access import Role, tenant_view
from a2a_platform.console.presenters import STATE_LABELS, part_views, queue_items, task_rows, timeline
from a2a_platform.console.views.base import render_console
from agents.models import Agent
from tasks_app.access import get_task_for_tenant
from tasks_app.db import UNAVAILABLE_ERRORS
from tasks_app.models import Artifact, Message, TaskState
from tasks_app.operator import (
    NotAnApprover,
    TaskConflict,
    operator_answer,
    operator_authorize,
    operator_cancel,
)
from tasks_app.protocol.errors import store_unavailable
from tasks_app.selectors import principal_names, tasks_matching, tenant_tasks

MAX_ANSWER_CHARS = 10_000
# Files an agent sent may be opened inline only as these types; anything else downloads.
INLINE_TYPES = {"image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf", "text/plain"}
QUEUES = {
    "input-required": (TaskState.INPUT_REQUIRED, "Input required"),
    "auth-required": (TaskState.AUTH_REQUIRED, "Auth required"),
}


@require_GET
@tenant_view()
def task_list(request):
    tenant = request.console.tenant
    filters = {
        "agent": request.GET.get("agent", "").strip(),
        "state": request.GET.get("state", "").strip(),
        "context": request.GET.get("context", "").strip(),
        "q": request.GET.get("q", "").strip(),
    }
    tasks = tasks_matching(
        tenant_tasks(tenant),
        agent=filters["agent"],
        # An unknown state in the URL lists every task, as no filter does.
        state=filters["state"] if filters["state"] in STATE_LABELS else "",
        context_id=filters["context"],
        text=filters["q"],
    )
    tasks = tasks.order_by("-updated_at", "pk")
    page = Paginator(tasks, settings.CONSOLE_PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render_console(
        request,
        "console/tasks/list.html",
        {
            "page": page,
            "rows": task_rows(page.object_list),
            "filters": filters,
            "query": query.urlencode(),
            "agents": Agent.objects.filter(tenant=tenant).order_by("name").values_list("slug", "name"),
            "states": TaskState.choices,
        },
    )


@require_GET
@tenant_view()
def task_queue(request, queue: str):
    if queue not in QUEUES:
        raise Http404()
    state, title = QUEUES[queue]
    tenant = request.console.tenant
    tasks = tasks_matching(tenant_tasks(tenant), state=state)
    page = Paginator(tasks.order_by("status_timestamp", "pk"), settings.CONSOLE_PAGE_SIZE).get_page(
        request.GET.get("page")
    )
    return render_console(
        request,
        "console/tasks/queue.html",
        {"page": page, "items": queue_items(tenant, page.object_list), "queue": queue, "title": title},
    )


def _push_deliveries(task):
    """Push delivery attempts, once the push notification models are installed."""
    try:
        model = apps.get_model("tasks_app", "PushDelivery")
    except LookupError:
        return None
    return list(
        model.objects.filter(config__task=task).select_related("config").order_by("seq", "attempt")[:200]
    )


@require_GET
@tenant_view()
def task_detail(request, task_id):
    task = _task_or_404(request, task_id)
    messages_ = list(task.messages.order_by("created_at", "pk"))
    names = principal_names(task.tenant, [task.owner, *(message.sender for message in messages_)])
    conversation = [
        {"message": message, "parts": part_views(message.parts), "sender": names.get(message.sender, "")}
        for message in messages_
    ]
    # Every user message after the first answered a prompt (a task only takes one while it waits).
    answers = [names.get(m.sender) or "the caller" for m in messages_ if m.role == Message.Role.USER][1:]
    artifacts = [
        {"artifact": artifact, "parts": part_views(artifact.parts)}
        for artifact in task.artifacts.order_by("created_at", "pk")
    ]
    return render_console(
        request,
        "console/tasks/detail.html",
        {
            "task": task,
            "caller": names.get(task.owner, task.owner),
            # A draft-dialect client's own id for the task (a missing alias reads as None).
            "client_task_id": getattr(getattr(task, "draft_alias", None), "client_task_id", ""),
            "prompt": part_views(task.status_message.parts) if task.status_message else [],
            "conversation": conversation,
            "artifacts": artifacts,
            "timeline": timeline(task.events.order_by("seq"), answered_by=answers),
            "deliveries": _push_deliveries(task),
        },
    )


def _task_or_404(request, task_id):
    task = get_task_for_tenant(request.console.tenant, task_id)
    if task is None:
        raise Http404("No such task")
    return task


def _no_longer_waiting(request, refused: TaskConflict, what: str) -> None:
    state = refused.task.get_state_display().lower()
    if refused.by:
        text = f"This task was already {what} by {refused.by}: it is now {state}. Nothing was sent."
    elif refused.task.is_interrupted:
        text = f"This task moved on since you opened it: it is {state} again. Nothing was sent."
    else:
        text = f"This task is no longer waiting: it is now {state}. Nothing was sent."
    messages.error(request, text)


def _seen(request) -> int | None:
    """The task's last log entry when the form was drawn (None from a form without it)."""
    seen = request.POST.get("seen", "")
    return int(seen) if seen.isascii() and seen.isdigit() and len(seen) < 10 else None


def _back(request, task_id):
    """Back to the queue the action came from (its next item focused), or to the task."""
    queue = request.POST.get("back", "")
    if queue in QUEUES:
        url = reverse("console:queue", args=[request.console.tenant.slug, queue])
        return redirect(f"{url}#next")
    return redirect("console:task", tenant=request.console.tenant.slug, task_id=task_id)


@require_POST
@tenant_view(Role.OPERATOR)
def task_answer(request, task_id):
    text = request.POST.get("text", "").strip()
    if not text or len(text) > MAX_ANSWER_CHARS:
        messages.error(request, f"Write an answer (1 to {MAX_ANSWER_CHARS} characters).")
        return _back(request, task_id)
    task = _task_or_404(request, task_id)
    try:
        operator_answer(task, request.user, text, seen=_seen(request))
    except TaskConflict as refused:
        _no_longer_waiting(request, refused, "answered")
    except UNAVAILABLE_ERRORS as exc:
        messages.error(request, store_unavailable(exc).message)
    else:
        messages.success(request, f"Answer sent to {task.agent.name} (task {str(task.pk)[:8]}).")
    return _back(request, task_id)


@require_POST
@tenant_view(Role.OPERATOR)
def task_authorize(request, task_id):
    decision = request.POST.get("decision")
    if decision not in ("grant", "deny"):
        messages.error(request, "Choose grant or deny.")
        return _back(request, task_id)
    task = _task_or_404(request, task_id)
    try:
        operator_authorize(task, request.user, granted=decision == "grant", seen=_seen(request))
    except TaskConflict as refused:
        _no_longer_waiting(request, refused, "decided")
    except NotAnApprover as refused:
        messages.error(request, str(refused))
    except UNAVAILABLE_ERRORS as exc:
        messages.error(request, store_unavailable(exc).message)
    else:
        word = "granted" if decision == "grant" else "denied"
        messages.success(request, f"Authorization {word} (task {str(task.pk)[:8]}, {task.agent.name}).")
    return _back(request, task_id)


@require_POST
@tenant_view(Role.OPERATOR)
def task_cancel(request, task_id):
    task = _task_or_404(request, task_id)
    try:
        operator_cancel(task, request.user)
    except TaskConflict as refused:
        messages.error(request, f"This task is already {refused.task.get_state_display().lower()}.")
    except UNAVAILABLE_ERRORS as exc:
        messages.error(request, store_unavailable(exc).message)
    else:
        messages.success(request, "Task canceled.")
    return redirect("console:task", tenant=request.console.tenant.slug, task_id=task_id)


@require_GET
@tenant_view()
def artifact_download(request, task_id):
    task = get_task_for_tenant(request.console.tenant, task_id)
    index = request.GET.get("part", "")
    # isdecimal, not isdigit ("²" is a digit int() refuses), and no more digits than a part count has.
    index = int(index) if index.isdecimal() and len(index) <= 9 else -1
    # Files come in artifacts and in messages; both are looked up inside this task only.
    if "artifact" in request.GET:
        holder = Artifact.objects.filter(task=task, artifact_id=request.GET["artifact"])
    else:
        holder = Message.objects.filter(task=task, message_id=request.GET.get("message", ""))
    holder = holder.first() if task else None
    if holder is None or not 0 <= index < len(holder.parts) or "raw" not in holder.parts[index]:
        raise Http404("No such file")
    part = holder.parts[index]
    try:
        body = base64.b64decode(part["raw"], validate=False)
    except (binascii.Error, ValueError):
        raise Http404("The file is not readable") from None
    media_type = str(part.get("mediaType", "")).lower()
    # Agent-chosen names: keep a safe subset of characters for the header.
    filename = re.sub(r"[^A-Za-z0-9._-]+", "_", str(part.get("filename") or f"part-{index}"))[:100]
    inline = media_type in INLINE_TYPES and request.GET.get("inline") == "1"
    response = HttpResponse(body, content_type=media_type if inline else "application/octet-stream")
    response["Content-Disposition"] = f'{"inline" if inline else "attachment"}; filename="{filename}"'
    # Even if opened, the file gets no scripts and no access to the console's origin.
    response["Content-Security-Policy"] = "sandbox"
    return response
