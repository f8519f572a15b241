"""Retention: deletes finished tasks older than their tenant's retention period.

A tenant with retention_days set keeps a terminal task (completed, failed,
canceled, rejected) for that many days after its last update, and until its
webhook deliveries are all sent or given up; then the task goes with
everything that hangs off it: messages, artifacts, its event log, push
configs and their delivery records, a draft client's alias. Tasks that are
not terminal are never touched, however old; contexts stay (another task may
still use one).

Each run also deletes expired Idempotency-Keys (older than A2A_IDEMPOTENCY_TTL,
every tenant's: an expired key counts for nothing), in the same batches: a
draft-dialect send writes one per message, and without this they went only
with their task or on the key's next use.

Runs every A2A_RETENTION_INTERVAL seconds: scheduled by beat in services
mode, by a thread of `manage.py serve` embedded. It deletes in batches of
RETENTION_BATCH tasks, one short transaction each, so no table is locked for
long and a sweep over millions of rows never holds one transaction open; a
run stops after RETENTION_MAX_BATCHES and the next run goes on.
"""

import logging
import time
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from tasks_app.models import (
    TERMINAL_STATES,
    Artifact,
    DraftTaskAlias,
    IdempotencyKey,
    Message,
    PushConfig,
    PushDelivery,
    Task,
    TaskEvent,
)
from tenants.models import Tenant

logger = logging.getLogger(__name__)

RETENTION_BATCH = 500
RETENTION_MAX_BATCHES = 200


def expired_tasks(tenant: Tenant, now=None):
    """The tenant's terminal tasks whose last update is older than its retention period.

    Not one with a webhook delivery still to send (a receiver down for days, a
    long backlog): it goes once every event was sent or given up. Nor then can a
    retry being queued for it (push._record) fail the batch deleting it.
    """
    if tenant.retention_days is None:
        return Task.objects.none()
    cutoff = (now or timezone.now()) - timedelta(days=tenant.retention_days)
    unsent = PushDelivery.objects.filter(config__task_id=OuterRef("pk"), status__in=PushDelivery.OPEN)
    return Task.objects.filter(tenant=tenant, state__in=TERMINAL_STATES, updated_at__lt=cutoff).exclude(
        Exists(unsent)
    )


def _delete_batch(tenant: Tenant, now, batch: int) -> int:
    with transaction.atomic():
        # Lock the batch (skipping rows another transaction holds) and check the rule again under the lock.
        pks = list(
            expired_tasks(tenant, now)
            .order_by("updated_at")
            .select_for_update(skip_locked=True)
            .values_list("pk", flat=True)[:batch]
        )
        if not pks:
            return 0
        # The big child tables go with one DELETE each, without loading their rows
        # (QuerySet.delete() would fetch every event's id to look for deliveries).
        # Order is free: the foreign keys are checked at commit.
        for children in (
            PushDelivery.objects.filter(config__task_id__in=pks),
            PushConfig.objects.filter(task_id__in=pks),
            TaskEvent.objects.filter(task_id__in=pks),
            Artifact.objects.filter(task_id__in=pks),
            DraftTaskAlias.objects.filter(task_id__in=pks),
            Message.objects.filter(task_id__in=pks),
        ):
            children._raw_delete(children.db)
        # The tasks through the ORM, so whatever else refers to a task is cascaded as declared.
        Task.objects.filter(pk__in=pks).delete()
        return len(pks)


def retention_sweep(
    *, tenant: Tenant | None = None, batch: int = RETENTION_BATCH, max_batches: int = RETENTION_MAX_BATCHES
) -> dict:
    """One retention run over every tenant with a period (or just `tenant`); returns what it deleted."""
    now = timezone.now()
    tenants = [tenant] if tenant is not None else Tenant.objects.filter(retention_days__isnull=False)
    deleted: dict[str, int] = {}
    batches = 0
    started = time.monotonic()
    for current in tenants:
        while batches < max_batches:
            count = _delete_batch(current, now, batch)
            batches += 1
            if not count:
                break
            deleted[current.slug] = deleted.get(current.slug, 0) + count
            if count < batch:
                break
    keys = 0
    while tenant is None and batches < max_batches:
        count = _delete_expired_keys(now, batch)
        batches += 1
        keys += count
        if count < batch:
            break
    if deleted or keys:
        logger.info(
            "Retention deleted %s task(s) and %s expired Idempotency-Key(s) in %.1f s: %s",
            sum(deleted.values()),
            keys,
            time.monotonic() - started,
            deleted,
        )
    return {"deleted": deleted, "keys": keys, "batches": batches}


def _delete_expired_keys(now, batch: int) -> int:
    """One batch of Idempotency-Key records past A2A_IDEMPOTENCY_TTL; how many went.

    The age is checked again as they are deleted: a key renewed meanwhile (a draft's new
    answer in the same words, services._key_claim) stays.
    """
    cutoff = now - timedelta(seconds=settings.A2A_IDEMPOTENCY_TTL)
    expired = IdempotencyKey.objects.filter(created_at__lt=cutoff)
    pks = list(expired.values_list("pk", flat=True)[:batch])
    return expired.filter(pk__in=pks).delete()[0] if pks else 0
