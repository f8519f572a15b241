from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection
from django.http import HttpResponse, JsonResponse
from django.utils.crypto import constant_time_compare

from a2a_platform.celery import app as celery_app


async def healthz(request):
    return JsonResponse({"status": "ok"})


def _check_database() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return "ok"


def _check_broker() -> str:
    with celery_app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, timeout=2)
    return "ok"


async def readyz(request):
    checks = {}
    for name, check in (("database", _check_database), ("broker", _check_broker)):
        try:
            checks[name] = await sync_to_async(check)()
        except Exception as exc:  # any failure means "not ready", with the reason shown
            checks[name] = f"error: {exc.__class__.__name__}"
    ready = all(value == "ok" for value in checks.values())
    return JsonResponse({"status": "ok" if ready else "unavailable", **checks}, status=200 if ready else 503)


def _metrics_text() -> str:
    from django.db.models import Count

    from tasks_app.models import Message, Task

    lines = [
        "# HELP a2a_tasks Tasks stored, by state.",
        "# TYPE a2a_tasks gauge",
    ]
    for row in Task.objects.values("state").annotate(n=Count("pk")).order_by("state"):
        lines.append(f'a2a_tasks{{state="{row["state"]}"}} {row["n"]}')
    lines += ["# HELP a2a_turns Agent turns, by lifecycle.", "# TYPE a2a_turns gauge"]
    turns = Message.objects.exclude(turn="").values("turn").annotate(n=Count("pk")).order_by("turn")
    for row in turns:
        lines.append(f'a2a_turns{{turn="{row["turn"]}"}} {row["n"]}')
    return "\n".join(lines) + "\n"


def _may_read_metrics(request) -> bool:
    """Platform-wide counts: a bearer METRICS_TOKEN, or loopback when no token is configured."""
    if settings.METRICS_TOKEN:
        return constant_time_compare(
            request.headers.get("Authorization", ""), f"Bearer {settings.METRICS_TOKEN}"
        )
    return request.META.get("REMOTE_ADDR") in ("127.0.0.1", "::1")


async def metrics(request):
    if not _may_read_metrics(request):
        return HttpResponse("Forbidden\n", status=403, content_type="text/plain")
    return HttpResponse(await sync_to_async(_metrics_text)(), content_type="text/plain; version=0.0.4")
