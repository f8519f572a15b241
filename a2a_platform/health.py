import logging

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection
from django.http import HttpResponse, JsonResponse
from django.utils.crypto import constant_time_compare
from kombu.exceptions import ChannelError
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

from a2a_platform.celery import app as celery_app
from tasks_app import metrics as platform_metrics

logger = logging.getLogger(__name__)


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


class StoreCollector:
    """Gauges read from the database and the broker at scrape time, in the process serving /metrics only.

    Every state is listed, zeros too, so a dashboard's series exist before the first task.
    """

    def collect(self):
        from django.db.models import Count

        from tasks_app.dispatch import embedded_queue_depth
        from tasks_app.models import Message, Task, TaskState

        tasks = GaugeMetricFamily("a2a_tasks", "Tasks stored, by state.", labels=["state"])
        counts = {
            row["state"]: row["n"] for row in Task.objects.values("state").annotate(n=Count("pk")).order_by()
        }
        for state in TaskState.values:
            tasks.add_metric([state], counts.get(state, 0))
        yield tasks

        turns = GaugeMetricFamily("a2a_turns", "Agent turns, by lifecycle.", labels=["turn"])
        rows = Message.objects.exclude(turn="").values("turn").annotate(n=Count("pk")).order_by()
        counts = {row["turn"]: row["n"] for row in rows}
        for turn in Message.Turn.values:
            if turn:
                turns.add_metric([turn], counts.get(turn, 0))
        yield turns

        depth = GaugeMetricFamily(
            "a2a_queue_depth",
            "Jobs waiting for a worker: turns on the turn queue; webhook deliveries and cancels (and"
            " beat's sweeps in services mode) on the control queue.",
            labels=["queue"],
        )
        queues = settings.A2A_LANE_QUEUES
        if settings.EMBEDDED_WORKER:
            depths = {queue: embedded_queue_depth(lane) for lane, queue in queues.items()}
        else:
            try:
                depths = _broker_queue_depths(list(queues.values()))
            except Exception as exc:  # the broker is down: no sample, the rest of the scrape still answers
                logger.warning("Queue depth unavailable: %r", exc)
                depths = {}
        for queue, jobs in depths.items():
            depth.add_metric([queue], jobs)
        yield depth


def _broker_queue_depths(queues: list[str]) -> dict[str, int]:
    """Jobs waiting in each queue, read on one broker connection (all of them or an exception)."""
    depths = {}
    with celery_app.connection_for_read() as conn:
        conn.ensure_connection(max_retries=1, timeout=2)
        for queue in queues:
            try:
                depths[queue] = conn.default_channel.queue_declare(queue=queue, passive=True).message_count
            except ChannelError:
                depths[queue] = 0  # Redis keeps no key for an empty queue
    return depths


def _metrics_text() -> bytes:
    store = CollectorRegistry(auto_describe=False)
    store.register(StoreCollector())
    if platform_metrics.MULTIPROCESS_DIR:
        # Every process's counts, from the files they write (tasks_app/metrics.py).
        platform_metrics.forget_dead_processes()
        processes = CollectorRegistry(auto_describe=False)
        MultiProcessCollector(processes)
    else:
        processes = REGISTRY  # one process: its own metrics (and the client's process metrics)
    return generate_latest(processes) + generate_latest(store)


def _may_read_metrics(request) -> bool:
    """Platform-wide counts: a bearer METRICS_TOKEN, or loopback when no token is configured.

    REMOTE_ADDR is the connection's peer, or behind trusted proxies the address
    they wrote (a2a_platform/forwarded.py): never an entry the caller sent.
    """
    if settings.METRICS_TOKEN:
        return constant_time_compare(
            request.headers.get("Authorization", ""), f"Bearer {settings.METRICS_TOKEN}"
        )
    return request.META.get("REMOTE_ADDR") in ("127.0.0.1", "::1")


async def metrics(request):
    if not _may_read_metrics(request):
        return HttpResponse("Forbidden\n", status=403, content_type="text/plain")
    return HttpResponse(await sync_to_async(_metrics_text)(), content_type=CONTENT_TYPE_LATEST)
