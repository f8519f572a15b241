from asgiref.sync import sync_to_async
from django.db import connection
from django.http import JsonResponse

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
