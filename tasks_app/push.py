"""Push notifications: webhook configs per task and the delivery of each event to them.

Every event appended to a task's log gets one PushDelivery row per config of
the task, in the same transaction, and one Celery job per (config, event) after
commit. The rows are the queue: a config's events go out strictly in seq order,
because a job only ever sends the config's oldest open attempt, claimed with a
conditional UPDATE, so a redelivered or concurrent job finds it taken and
returns. A failed attempt schedules the next one with exponential backoff and
blocks the events behind it until it succeeds or is given up.

Every request is made to an address that was resolved and checked just before
(the SSRF guard, agents/outbound.py), with the original Host header and TLS server
name; a host that does not resolve (or resolves to a refused address) fails the
attempt, which is retried like any other failure.
"""

import asyncio
import base64
import json
import logging
import re
import ssl
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta

import httpx
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone
from structlog.contextvars import bound_contextvars

from agents.outbound import (
    HEADER_VALUE_RE,
    Target,
    UrlRefused,
    http_error_text,
    lookups_for,
    url_check,
    url_syntax_check,
)
from tasks_app import engine, metrics
from tasks_app.access import Caller, get_task_for_caller
from tasks_app.commits import atomic_checked, rechecked
from tasks_app.db import database_now, database_now_column
from tasks_app.dispatch import DELIVER_PUSH, job_send
from tasks_app.fields import Undecryptable
from tasks_app.models import PushConfig, PushDelivery, Task, TaskEvent
from tenants import sql

logger = logging.getLogger(__name__)

CONTENT_TYPE = "application/a2a+json"
CONFIG_ID_RE = re.compile(r"^[A-Za-z0-9._~:@+=-]{1,255}$")
# RFC 9110 token: what an HTTP auth scheme may be made of.
AUTH_SCHEME_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}$")
UNDECRYPTABLE_ERROR = "cannot decrypt the webhook credentials; was FIELD_ENCRYPTION_KEYS changed?"
LIST_PAGE_SIZE_DEFAULT = 50
LIST_PAGE_SIZE_MAX = 100


# --- Configs: input, storage, output ---------------------------------------------
@dataclass(frozen=True)
class PushConfigInput:
    config_id: str
    url: str
    token: str
    auth_scheme: str
    auth_credentials: str


def push_config_clean(config: pb.TaskPushNotificationConfig) -> PushConfigInput:
    """Check a config from a request; InvalidParamsError says what is wrong.

    The URL's host is not resolved here (it may not resolve yet): delivery
    resolves and screens it, and an address it refuses is a failed attempt.
    """
    url = config.url.strip()
    if not url:
        raise InvalidParamsError(message="Push notification config needs a url")
    if len(url) > 2048:
        raise InvalidParamsError(message="Push notification url is longer than 2048 characters")
    if config.id and not CONFIG_ID_RE.fullmatch(config.id):
        raise InvalidParamsError(
            message="Push notification config id must be 1-255 letters, digits or ._~:@+=- characters"
        )
    # Header values: anything else could split the webhook request's headers, or be refused
    # by httpx at each delivery with the value quoted in the error.
    if len(config.token) > 1024 or not HEADER_VALUE_RE.fullmatch(config.token):
        raise InvalidParamsError(
            message="Push notification token must be 0-1024 printable ASCII characters, "
            "with no space at either end"
        )
    scheme = credentials = ""
    if config.HasField("authentication"):
        scheme, credentials = config.authentication.scheme, config.authentication.credentials
        if not AUTH_SCHEME_RE.fullmatch(scheme):
            raise InvalidParamsError(message="authentication.scheme must be an HTTP scheme like 'Bearer'")
        if len(credentials) > 4096 or not HEADER_VALUE_RE.fullmatch(credentials):
            raise InvalidParamsError(
                message="authentication.credentials must be up to 4096 printable ASCII characters, "
                "with no space at either end"
            )
    try:
        url_syntax_check(url, allow_private=settings.PUSH_ALLOW_PRIVATE_NETWORKS)
    except UrlRefused as exc:
        raise InvalidParamsError(message=f"Push notification url refused: {exc}") from None
    return PushConfigInput(
        config_id=config.id, url=url, token=config.token, auth_scheme=scheme, auth_credentials=credentials
    )


def push_config_save(task: Task, cleaned: PushConfigInput) -> tuple[PushConfig, bool]:
    """Store a config on a task whose row the caller has locked: the config, and whether it is new.

    A config with the same id on the task is replaced (how a client rotates
    its token); one without an id always gets a new UUID, never overwriting.
    """
    fields = {
        "url": cleaned.url,
        "token": cleaned.token,
        "auth_scheme": cleaned.auth_scheme,
        "auth_credentials": cleaned.auth_credentials,
    }
    if cleaned.config_id:
        existing = PushConfig.objects.filter(task=task, config_id=cleaned.config_id).first()
        if existing is not None:
            for name, value in fields.items():
                setattr(existing, name, value)
            existing.save(update_fields=[*fields, "updated_at"])
            return existing, False
    if PushConfig.objects.filter(task=task).count() >= settings.PUSH_MAX_CONFIGS_PER_TASK:
        raise InvalidParamsError(
            message=f"A task can have at most {settings.PUSH_MAX_CONFIGS_PER_TASK} push notification configs"
        )
    created = PushConfig.objects.create(
        tenant_id=task.tenant_id, task=task, config_id=cleaned.config_id or str(uuid.uuid4()), **fields
    )
    _count_configs(task, +1)
    return created, True


def _count_configs(task: Task, change: int) -> None:
    """Add `change` to a locked task's count of configs (Task.push_config_count)."""
    Task.objects.filter(pk=task.pk).update(push_config_count=F("push_config_count") + change)
    task.push_config_count += change


def push_config_dict(config: PushConfig) -> dict:
    """TaskPushNotificationConfig as ProtoJSON, without its secrets (token, credentials)."""
    data = {"id": config.config_id, "taskId": str(config.task_id), "url": config.url}
    if config.auth_scheme:
        data["authentication"] = {"scheme": config.auth_scheme}
    return data


def _caller_task(caller: Caller, task_id: str, *, for_update: bool = False) -> Task:
    if not task_id:
        raise InvalidParamsError(message="taskId is required")
    task = get_task_for_caller(caller, task_id, for_update=for_update)
    if task is None:
        raise TaskNotFoundError(message=f"Task {task_id} not found")
    return task


def push_config_create(caller: Caller, config: pb.TaskPushNotificationConfig) -> dict:
    """CreateTaskPushNotificationConfig: store a webhook for one of the caller's tasks."""
    cleaned = push_config_clean(config)

    def write() -> tuple[PushConfig, PushConfig | None]:
        # The task lock orders this against event_append: an event sees the config or not, never half.
        task = _caller_task(caller, config.task_id, for_update=True)
        stored, created = push_config_save(task, cleaned)
        # A COMMIT that got no answer: a new config found stored after all is answered as stored. A
        # replaced one cannot be told from its old self: that error stands, and its retry replaces it.
        return stored, stored if created else None

    return push_config_dict(atomic_checked(write, same=("task_id", "config_id")))


def push_config_get(caller: Caller, task_id: str, config_id: str) -> dict:
    task = _caller_task(caller, task_id)
    config = PushConfig.objects.filter(task=task, config_id=config_id).first()
    if config is None:
        # The spec answers a missing config with TaskNotFoundError.
        raise TaskNotFoundError(message=f"Push config '{config_id}' not found for task {task_id}")
    return push_config_dict(config)


def push_config_list(caller: Caller, task_id: str, *, page_size: int = 0, page_token: str = "") -> dict:
    """ListTaskPushNotificationConfigs, oldest first, in cursor pages."""
    if page_size < 0:
        raise InvalidParamsError(message="pageSize must not be negative")
    size = min(page_size or LIST_PAGE_SIZE_DEFAULT, LIST_PAGE_SIZE_MAX)
    task = _caller_task(caller, task_id)
    configs = PushConfig.objects.filter(task=task).order_by("pk")
    if page_token:
        configs = configs.filter(pk__gt=_decode_page_token(page_token))
    page = list(configs[: size + 1])
    result = {"configs": [push_config_dict(config) for config in page[:size]]}
    if len(page) > size:
        result["nextPageToken"] = base64.urlsafe_b64encode(f"pc:{page[size - 1].pk}".encode()).decode()
    return result


def _decode_page_token(token: str) -> int:
    try:
        prefix, _, pk = base64.urlsafe_b64decode(token.encode()).decode().partition(":")
        if prefix == "pc":
            return int(pk)
    except (ValueError, UnicodeError):
        pass
    raise InvalidParamsError(message="pageToken is not valid")


def push_config_delete(caller: Caller, task_id: str, config_id: str) -> None:
    """DeleteTaskPushNotificationConfig. Idempotent: deleting a missing config succeeds.

    Under the task's lock, as a batch queues deliveries (push_deliveries_queue),
    then the config's: a retry being queued for it (_record) either goes first
    and is deleted with it, or finds it gone. Otherwise a delivery row stored
    meanwhile failed the transaction that deleted its config, or the other one.
    """
    with transaction.atomic():
        task = _caller_task(caller, task_id, for_update=True)
        config_pks = list(
            PushConfig.objects.select_for_update()
            .filter(task=task, config_id=config_id)
            .values_list("pk", flat=True)
        )
        if config_pks:
            PushConfig.objects.filter(pk__in=config_pks).delete()
            _count_configs(task, -len(config_pks))


# --- Delivery ---------------------------------------------------------------------
def push_deliveries_queue(task: Task, events: list[TaskEvent]) -> None:
    """Queue events for every push config of their task, inside the transaction that logs them.

    No query for a task without configs (Task.push_config_count, read with its
    lock); jobs are enqueued after commit.
    """
    if not task.push_config_count or not events:
        return
    # Hand-written (tenants/sql.py): most batches of most turns ask this.
    config_pks = [
        pk
        for (pk,) in sql.fetch_all(
            f"SELECT id FROM {sql.table(PushConfig)} WHERE task_id = %s",
            [sql.prep(PushConfig, "task", task.pk)],
        )
    ]
    if not config_pks or not events:
        return
    # Hand-written too: created_at on the database's clock, which push_sweep judges it by.
    sql.insert(
        [PushDelivery(config_id=pk, event=event, seq=event.seq) for event in events for pk in config_pks]
    )
    seq = events[0].seq
    # One job per config: a job sends the config's queued events in order.
    transaction.on_commit(rechecked(lambda: [push_dispatch(pk, seq) for pk in config_pks]), robust=True)


def push_dispatch(config_pk: int, seq: int | None = None, *, countdown: float | None = None) -> None:
    """Enqueue a delivery job. A broker failure only delays delivery: the sweeper re-dispatches."""
    job_send(DELIVER_PUSH, config_pk, seq, countdown=countdown)


def push_deliver(config_pk: int, seq: int | None = None) -> int:
    """Send the config's queued events in seq order until none is left or a retry is pending.

    `seq` is the event the job was enqueued for. Answers how many attempts this call made.
    It starts no new attempt after PUSH_JOB_BUDGET seconds: it queues a job for the rest
    and returns, freeing its thread, so a config with a long backlog or a slow receiver
    lets the control lane's other jobs in (beat's sweeps first) between its attempts.
    """
    made = 0
    until = time.monotonic() + settings.PUSH_JOB_BUDGET
    while True:
        if made and time.monotonic() >= until:
            if PushDelivery.objects.filter(config_id=config_pk, status__in=PushDelivery.OPEN).exists():
                push_dispatch(config_pk)  # the rest, in order: the next job claims the oldest open attempt
            return made
        delivery = _claim_next(config_pk, seq)
        if delivery is None:
            return made
        made += 1
        with bound_contextvars(task_id=str(delivery.config.task_id)):
            code, error = _post(delivery)
            if not _record(delivery, code, error):
                return made


def _claim_next(config_pk: int, seq: int | None) -> PushDelivery | None:
    """Claim the config's oldest open attempt, or None if it is not ours to send now."""
    # With the database's now: a retry is due by the clock its not_before was written on.
    head = (
        PushDelivery.objects.filter(config_id=config_pk, status__in=PushDelivery.OPEN)
        .annotate(database_now=database_now_column())
        .order_by("seq", "attempt")
        .first()
    )
    if head is None:
        return None
    now = head.database_now
    claim = PushDelivery.objects.filter(pk=head.pk, status=head.status)
    taken_over = {}
    if head.status == PushDelivery.Status.SENDING:
        # Its worker was lost mid-send, if it started PUSH_SENDING_LEASE ago: send it again (at
        # least once beats never). Judged on the clock started_at is written on (database_now):
        # a worker whose clock is ahead does not take over an attempt still in flight.
        # Otherwise it is in flight elsewhere, and that worker carries the chain on.
        claim = claim.filter(
            started_at=head.started_at,
            started_at__lt=database_now() - timedelta(seconds=settings.PUSH_SENDING_LEASE),
        )
        # The lost send counts as an attempt: a send that kills its worker every time (a reply
        # that exhausts it, say) is given up at PUSH_MAX_ATTEMPTS, not tried for ever with the
        # config's later events held behind it.
        if head.attempt >= settings.PUSH_MAX_ATTEMPTS:
            lost = {"error": "its worker was lost while sending it", "finished_at": database_now()}
            if not claim.update(status=PushDelivery.Status.GIVEN_UP, **lost):
                return None  # not lost, or another job gave it up and carries the chain on
            metrics.push_attempt("given_up")
            logger.warning(
                "Push delivery %s#%s attempt %s lost its worker (giving up)",
                config_pk,
                head.seq,
                head.attempt,
            )
            return _claim_next(config_pk, seq)
        taken_over = {"attempt": F("attempt") + 1}
    elif head.not_before is not None and head.not_before > now:
        if head.seq == seq and head.status == PushDelivery.Status.RETRYING:
            # This is the retry's own job and it came early (clock skew): come back when due.
            push_dispatch(config_pk, seq, countdown=(head.not_before - now).total_seconds())
        return None  # otherwise the retry's own delayed job will come
    if not claim.update(status=PushDelivery.Status.SENDING, started_at=database_now(), **taken_over):
        return None  # another job claimed it and carries the chain on
    return PushDelivery.objects.select_related("config", "event").get(pk=head.pk)


# One TLS context for all webhook requests: building one loads the CA bundle.
_tls_context: ssl.SSLContext | None = None


def _tls() -> ssl.SSLContext:
    global _tls_context
    if _tls_context is None:
        _tls_context = httpx.create_ssl_context()
    return _tls_context


def _post(delivery: PushDelivery) -> tuple[int | None, str]:
    """POST one event to the config's webhook. Answers (HTTP status or None, error text)."""
    config = delivery.config
    # The secrets are stored encrypted (tasks_app/fields.py); no key opening them fails the attempt.
    if isinstance(config.token, Undecryptable) or isinstance(config.auth_credentials, Undecryptable):
        return None, UNDECRYPTABLE_ERROR
    # PUSH_TIMEOUT bounds the whole attempt: the lookup, then the request in what is left.
    deadline = time.monotonic() + settings.PUSH_TIMEOUT
    try:
        # Checked again at send time: the host's DNS may have changed since the config was made.
        # A DNS server that never answers fails the attempt.
        with lookups_for(config.tenant_id):
            target = url_check(
                config.url, allow_private=settings.PUSH_ALLOW_PRIVATE_NETWORKS, timeout=settings.PUSH_TIMEOUT
            )
    except UrlRefused as exc:
        return None, f"URL refused: {exc}"
    headers = {
        "Content-Type": CONTENT_TYPE,
        # Stable across attempts, so a receiver can drop the duplicates at-least-once delivery brings.
        "X-A2A-Event-Id": f"{config.task_id}:{delivery.seq}",
    }
    if config.token:
        headers["X-A2A-Notification-Token"] = config.token
    if config.auth_scheme:
        headers["Authorization"] = f"{config.auth_scheme} {config.auth_credentials}".rstrip()
    body = json.dumps(delivery.event.payload, separators=(",", ":")).encode()
    try:
        status, reason = engine.run(_send(target, headers, body, deadline - time.monotonic()))
    except httpx.HTTPError as exc:
        return None, f"{exc.__class__.__name__}: {http_error_text(exc)}"[:1000]
    except TimeoutError:
        return None, f"No answer within {settings.PUSH_TIMEOUT:g} s"
    if 200 <= status < 300:
        return status, ""
    return status, f"HTTP {status} {reason}"[:1000]


async def _send(target: Target, headers: dict, body: bytes, budget: float) -> tuple[int, str]:
    """The POST, on the engine loop: `budget` seconds bound the whole request, not each read.

    httpx's timeout is per operation: a receiver that sent its answer a byte
    at a time held the worker thread as long as it liked, past the attempt's
    lease, and the sweep then sent the event again (twice, and out of order).
    """
    # No proxies from the environment and no redirects: either would undo the address check.
    async with httpx.AsyncClient(timeout=settings.PUSH_TIMEOUT, verify=_tls(), trust_env=False) as client:
        request = target.request(client, "POST", headers=headers, content=body)
        async with asyncio.timeout(max(budget, 0.0)):
            response = await client.send(request, stream=True, follow_redirects=False)
            # The body is not read: a receiver only owes us a status code.
            await response.aclose()
    return response.status_code, response.reason_phrase


def push_retry_delay(attempt: int) -> float:
    """Seconds to wait before attempt + 1."""
    return min(settings.PUSH_RETRY_BASE_DELAY * 2 ** (attempt - 1), settings.PUSH_RETRY_MAX_DELAY)


def _record(delivery: PushDelivery, code: int | None, error: str) -> bool:
    """Store the outcome of an attempt. True if the chain goes on to the next event now."""
    now = timezone.now()
    mine = PushDelivery.objects.filter(
        pk=delivery.pk, status=PushDelivery.Status.SENDING, started_at=delivery.started_at
    )
    outcome = {"response_code": code, "error": error, "finished_at": now}
    if code is not None and 200 <= code < 300:
        metrics.push_attempt("succeeded")
        return bool(mine.update(status=PushDelivery.Status.SUCCEEDED, **outcome))
    last = delivery.attempt >= settings.PUSH_MAX_ATTEMPTS
    metrics.push_attempt("given_up" if last else "failed")
    logger.warning(
        "Push delivery %s#%s attempt %s failed%s: %s",
        delivery.config_id,
        delivery.seq,
        delivery.attempt,
        " (giving up)" if last else "",
        error,
    )
    if last:
        # Given up: the events behind it go out rather than wait forever.
        return bool(mine.update(status=PushDelivery.Status.GIVEN_UP, **outcome))
    delay = push_retry_delay(delivery.attempt)
    try:
        with transaction.atomic():
            # The config's row first, as push_config_delete locks it before deleting its deliveries:
            # then either the retry is stored and deleted with it, or the config is found gone.
            if not PushConfig.objects.select_for_update().filter(pk=delivery.config_id).values_list("pk"):
                return False
            # Zero rows: the config was deleted, or a lost-lease takeover owns this attempt now.
            if not mine.update(status=PushDelivery.Status.FAILED, **outcome):
                return False
            PushDelivery.objects.create(
                config_id=delivery.config_id,
                event_id=delivery.event_id,
                seq=delivery.seq,
                attempt=delivery.attempt + 1,
                status=PushDelivery.Status.RETRYING,
                # On the database's clock, as _claim_next and push_sweep judge it.
                not_before=database_now() + timedelta(seconds=delay),
            )
            config_pk, seq = delivery.config_id, delivery.seq
            transaction.on_commit(lambda: push_dispatch(config_pk, seq, countdown=delay))
    except IntegrityError:
        return False  # the config went away meanwhile
    return False


def push_sweep() -> dict:
    """Re-dispatch configs whose queued attempts no job will send (lost broker message, dead worker)."""
    config_pks = list(stuck_configs())
    for config_pk in config_pks:
        push_dispatch(config_pk)
    return {"redispatched": len(config_pks)}


def stuck_configs():
    """The configs with an attempt no job will send: quiet for 30 s, or sending for PUSH_SENDING_LEASE.

    Judged on the database's clock, which created_at, not_before and
    started_at are written on: a sweeper whose clock is behind finds them in time.
    """
    now = database_now()
    quiet = now - timedelta(seconds=30)
    return (
        PushDelivery.objects.filter(
            Q(status=PushDelivery.Status.PENDING, created_at__lt=quiet)
            | Q(status=PushDelivery.Status.RETRYING, not_before__lt=quiet)
            | Q(
                status=PushDelivery.Status.SENDING,
                started_at__lt=now - timedelta(seconds=settings.PUSH_SENDING_LEASE),
            )
        )
        .values_list("config_id", flat=True)
        .distinct()
    )
