"""Retention: old finished tasks go with everything they own; nothing else is touched."""

import os
import uuid
from datetime import timedelta

import httpx
import pytest
from django.conf import settings
from django.utils import timezone

from agents.models import Agent
from tasks_app.models import (
    Artifact,
    DraftTaskAlias,
    IdempotencyKey,
    Message,
    PushConfig,
    PushDelivery,
    Task,
    TaskEvent,
    TaskState,
)
from tasks_app.retention import retention_sweep
from tenants.models import Tenant
from tests.api.tenancy import new_message
from tests.live import child_env, kill_hard, start_beat, start_web, wait_until

SERVICES_MODE = bool(os.environ.get("REDIS_URL"))


def make_tenant(retention_days=None) -> Tenant:
    tenant = Tenant.objects.create(
        slug=f"keep-{uuid.uuid4().hex[:8]}", name="Retention test", retention_days=retention_days
    )
    Agent.objects.create(tenant=tenant, slug="echo", name="Echo", handler="echo", visibility="public")
    Agent.objects.create(
        tenant=tenant, slug="clarify", name="Clarify", handler="clarify", visibility="public"
    )
    return tenant


def send(server, tenant: Tenant, agent: str = "echo") -> Task:
    body = {"jsonrpc": "2.0", "id": "r-1", "method": "SendMessage", "params": new_message("keep me?")}
    answer = httpx.post(
        f"{server.base_url}/a2a/{tenant.slug}/{agent}/", json=body, headers={"A2A-Version": "1.0"}, timeout=30
    ).json()
    return Task.objects.get(pk=answer["result"]["task"]["id"])


def age(task: Task, days: float) -> None:
    # QuerySet.update leaves auto_now alone: the task looks last touched `days` ago.
    Task.objects.filter(pk=task.pk).update(updated_at=timezone.now() - timedelta(days=days))


def with_push_records(task: Task) -> None:
    """A push config with a delivery record and a draft alias, as a webhook and a draft client leave."""
    config = PushConfig.objects.create(
        tenant=task.tenant, task=task, config_id="hook", url="http://127.0.0.1:9/hook"
    )
    event = TaskEvent.objects.filter(task=task).order_by("seq").first()
    PushDelivery.objects.create(
        config=config, event=event, seq=event.seq, status=PushDelivery.Status.SUCCEEDED
    )
    DraftTaskAlias.objects.create(task=task, agent=task.agent, client_task_id=f"draft-{task.pk}")


def children(task_pk) -> dict[str, int]:
    return {
        "messages": Message.objects.filter(task_id=task_pk).count(),
        "artifacts": Artifact.objects.filter(task_id=task_pk).count(),
        "events": TaskEvent.objects.filter(task_id=task_pk).count(),
        "push_configs": PushConfig.objects.filter(task_id=task_pk).count(),
        "deliveries": PushDelivery.objects.filter(config__task_id=task_pk).count(),
        "aliases": DraftTaskAlias.objects.filter(task_id=task_pk).count(),
    }


def test_it_deletes_exactly_the_old_terminal_tasks_with_their_children(server, stored):
    tenant = make_tenant(retention_days=30)
    old_done = [send(server, tenant) for _ in range(3)]
    for task in old_done:
        assert task.state == TaskState.COMPLETED
        with_push_records(task)
        age(task, 31)
    old_failed = send(server, tenant)
    Task.objects.filter(pk=old_failed.pk).update(state=TaskState.FAILED)
    age(old_failed, 45)
    recent_done = send(server, tenant)
    age(recent_done, 29)
    old_waiting = send(server, tenant, "clarify")
    assert not old_waiting.is_terminal
    age(old_waiting, 400)
    # Another tenant keeps everything: it has no retention period.
    keeper = make_tenant()
    keepers_old = send(server, keeper)
    age(keepers_old, 400)
    before = children(old_done[0].pk)
    assert all(before.values()), before  # the test deletes something real

    # Batches of two: the four expired tasks take two full batches.
    result = retention_sweep(batch=2)
    assert result["deleted"][tenant.slug] == 4
    assert keeper.slug not in result["deleted"]

    for task in [*old_done, old_failed]:
        assert not Task.objects.filter(pk=task.pk).exists()
        assert set(children(task.pk).values()) == {0}
    for task in (recent_done, old_waiting, keepers_old):
        assert Task.objects.filter(pk=task.pk).exists()
        assert Message.objects.filter(task_id=task.pk).exists()
        assert TaskEvent.objects.filter(task_id=task.pk).exists()
    # GetTask on a deleted task answers like a task that never existed.
    body = {"jsonrpc": "2.0", "id": "g", "method": "GetTask", "params": {"id": str(old_done[0].pk)}}
    answer = httpx.post(
        f"{server.base_url}/a2a/{tenant.slug}/echo/", json=body, headers={"A2A-Version": "1.0"}, timeout=30
    )
    assert answer.json()["error"]["code"] == -32001
    # A second run finds nothing more.
    assert retention_sweep(tenant=tenant)["deleted"] == {}


def test_a_task_with_a_webhook_delivery_still_to_send_is_kept_until_it_is_sent(server, stored):
    # Retention must not drop events its webhook has not had yet (a receiver down for days).
    tenant = make_tenant(retention_days=1)
    task = send(server, tenant)
    with_push_records(task)
    delivery = PushDelivery.objects.get(config__task=task)
    PushDelivery.objects.filter(pk=delivery.pk).update(status=PushDelivery.Status.RETRYING)
    age(task, 2)

    assert retention_sweep(tenant=tenant)["deleted"] == {}
    assert Task.objects.filter(pk=task.pk).exists()
    PushDelivery.objects.filter(pk=delivery.pk).update(status=PushDelivery.Status.GIVEN_UP)
    assert retention_sweep(tenant=tenant)["deleted"] == {tenant.slug: 1}
    assert set(children(task.pk).values()) == {0}


def test_expired_idempotency_keys_go_with_every_run(server, stored):
    tenant = make_tenant()  # no retention period: its tasks stay, its expired keys do not
    task = send(server, tenant)
    ttl = timedelta(seconds=settings.A2A_IDEMPOTENCY_TTL)
    fields = {"tenant": tenant, "agent": task.agent, "caller": "anonymous", "body_hash": "h", "task": task}
    old = IdempotencyKey.objects.create(
        key="old", created_at=timezone.now() - ttl - timedelta(minutes=1), **fields
    )
    fresh = IdempotencyKey.objects.create(key="fresh", created_at=timezone.now() - ttl / 2, **fields)

    assert retention_sweep(batch=1)["keys"] >= 1
    assert not IdempotencyKey.objects.filter(pk=old.pk).exists()
    assert IdempotencyKey.objects.filter(pk=fresh.pk).exists()
    assert Task.objects.filter(pk=task.pk).exists()
    # A run for one tenant (the console's) leaves keys to the periodic one.
    IdempotencyKey.objects.filter(pk=fresh.pk).update(created_at=timezone.now() - ttl - timedelta(minutes=1))
    assert retention_sweep(tenant=tenant)["keys"] == 0
    assert IdempotencyKey.objects.filter(pk=fresh.pk).exists()
    fresh.delete()


def test_a_run_stops_after_its_batch_budget_and_the_next_goes_on(server, stored):
    tenant = make_tenant(retention_days=1)
    tasks = [send(server, tenant) for _ in range(3)]
    for task in tasks:
        age(task, 2)
    assert retention_sweep(tenant=tenant, batch=1, max_batches=2)["deleted"] == {tenant.slug: 2}
    assert Task.objects.filter(tenant=tenant).count() == 1
    assert retention_sweep(tenant=tenant, batch=1, max_batches=2)["deleted"] == {tenant.slug: 1}
    assert Task.objects.filter(tenant=tenant).count() == 0


@pytest.fixture
def scheduled(db_settings, log_dir, tmp_path, server):
    """What runs retention periodically: a beat process (services) or `manage.py serve`'s thread."""
    fast = {"A2A_RETENTION_INTERVAL": "1", "A2A_SWEEP_INTERVAL": "0.5"}
    if SERVICES_MODE:
        # The session's worker runs the job; beat only sends it.
        beat = start_beat("beat-retention", child_env(db_settings, fast), log_dir, tmp_path)
        yield [beat]
        # Beat holds nothing worth a clean stop (its schedule file is in tmp_path).
        kill_hard(beat)
    else:
        web = start_web(db_settings, log_dir, name="web-retention", extra_env=fast)
        yield web.processes
        web.stop()


def test_the_periodic_job_deletes_expired_tasks(server, stored, scheduled):
    tenant = make_tenant(retention_days=7)
    old, recent = send(server, tenant), send(server, tenant)
    age(old, 8)
    wait_until(
        lambda: not Task.objects.filter(pk=old.pk).exists(), "the retention job to run", scheduled, timeout=30
    )
    assert Task.objects.filter(pk=recent.pk).exists()
