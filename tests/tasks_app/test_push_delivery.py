"""Push delivery to a real webhook receiver on loopback, through the running platform."""

import json
import time
import uuid

import pytest
from a2a.types import a2a_pb2 as pb
from google.protobuf.json_format import ParseDict

from agents.models import Agent
from tasks_app.models import PushConfig, PushDelivery, Task, TaskEvent
from tasks_app.push import push_deliver
from tenants.models import Tenant
from tests.conftest import SERVICES_MODE, user_message
from tests.tasks_app.webhooks import new_path


def send_with_push(rpc, text: str, push: dict, **message_fields) -> dict:
    params = {
        **user_message(text, f"push-{uuid.uuid4()}", **message_fields),
        "configuration": {"taskPushNotificationConfig": push},
    }
    return rpc("SendMessage", params, **({"agent": push.pop("_agent")} if "_agent" in push else {}))


def stored_payloads(task_id: str) -> list[dict]:
    return list(TaskEvent.objects.filter(task_id=task_id).order_by("seq").values_list("payload", flat=True))


def wait_settled(config_filter: dict, timeout: float = 10.0) -> list[PushDelivery]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = list(PushDelivery.objects.filter(**config_filter).order_by("seq", "attempt"))
        if rows and not any(row.status in PushDelivery.OPEN for row in rows):
            return rows
        time.sleep(0.05)
    return list(PushDelivery.objects.filter(**config_filter).order_by("seq", "attempt"))


def test_webhook_gets_every_event_in_order_with_token_and_authorization(rpc, stored, receiver):
    path = new_path()
    push = {
        "url": receiver.url(path),
        "token": "tok-abc",
        "authentication": {"scheme": "Bearer", "credentials": "s3cret"},
    }
    task = send_with_push(rpc, "hello push", push)["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"

    got = receiver.wait_for(path, 4)
    bodies = [json.loads(r["body"]) for r in got]
    assert [next(iter(body)) for body in bodies] == ["task", "statusUpdate", "artifactUpdate", "statusUpdate"]
    # Exactly the stored log, in order: each body is one StreamResponse.
    assert bodies == stored_payloads(task["id"])
    for body in bodies:
        ParseDict(body, pb.StreamResponse())
    assert bodies[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    for seq, request in enumerate(got, start=1):
        headers = request["headers"]
        assert headers["Content-Type"] == "application/a2a+json"
        assert headers["X-A2A-Notification-Token"] == "tok-abc"
        assert headers["Authorization"] == "Bearer s3cret"
        assert headers["X-A2A-Event-Id"] == f"{task['id']}:{seq}"
        assert headers["Host"] == f"127.0.0.1:{receiver.server.server_address[1]}"


def test_a_receiver_failing_twice_still_gets_every_event_once_in_order(rpc, stored, receiver):
    path = new_path()
    receiver.failures[path] = 2
    task = send_with_push(rpc, "flaky", {"url": receiver.url(path), "id": "flaky"})["result"]["task"]

    got = receiver.wait_for(path, 4)
    assert [r["headers"]["X-A2A-Event-Id"] for r in got] == [f"{task['id']}:{seq}" for seq in (1, 2, 3, 4)]
    assert [json.loads(r["body"]) for r in got] == stored_payloads(task["id"])
    # The two failures were both the first event: nothing overtook it while it was retried.
    every = receiver.received(path)
    assert [(r["status"], r["headers"]["X-A2A-Event-Id"]) for r in every[:3]] == [
        (500, f"{task['id']}:1"),
        (500, f"{task['id']}:1"),
        (200, f"{task['id']}:1"),
    ]
    assert len(every) == 6

    rows = wait_settled({"config__task_id": task["id"], "config__config_id": "flaky"})
    assert [(r.seq, r.attempt, r.status, r.response_code) for r in rows] == [
        (1, 1, "failed", 500),
        (1, 2, "failed", 500),
        (1, 3, "succeeded", 200),
        (2, 1, "succeeded", 200),
        (3, 1, "succeeded", 200),
        (4, 1, "succeeded", 200),
    ]
    assert "500" in rows[0].error
    # Backoff: each retry waited at least its configured delay (0.2 s, then 0.4 s in
    # tests/live.py); a loaded machine can only make the waits longer, never shorter.
    first_gap = (rows[1].started_at - rows[0].finished_at).total_seconds()
    second_gap = (rows[2].started_at - rows[1].finished_at).total_seconds()
    assert first_gap >= 0.18
    assert second_gap >= 0.38


def test_inline_config_is_stored_on_the_new_task_without_secrets(rpc, stored, receiver):
    path = new_path()
    push = {"url": receiver.url(path), "token": "inline-token"}
    task = send_with_push(rpc, "inline", push)["result"]["task"]
    configs = rpc("ListTaskPushNotificationConfigs", {"taskId": task["id"]})["result"]["configs"]
    assert len(configs) == 1
    assert configs[0]["url"] == receiver.url(path) and configs[0]["taskId"] == task["id"]
    assert "token" not in configs[0]
    assert len(receiver.wait_for(path, 4)) == 4


def test_a_refused_inline_config_stores_no_task(rpc, stored):
    message_id = f"push-refused-{uuid.uuid4()}"
    params = {
        **user_message("nope", message_id),
        "configuration": {"taskPushNotificationConfig": {"url": "ftp://127.0.0.1/hook"}},
    }
    answer = rpc("SendMessage", params)
    assert answer["error"]["code"] == -32602
    assert "scheme" in answer["error"]["message"]
    assert not TaskEvent.objects.filter(task__messages__message_id=message_id).exists()


def test_a_config_created_on_a_waiting_task_gets_the_events_from_then_on(rpc, stored, receiver):
    Agent.objects.get_or_create(
        tenant=Tenant.objects.get(slug="demo"),
        slug="push-ask",
        defaults={"name": "push-ask", "handler": "push-ask", "visibility": Agent.Visibility.PUBLIC},
    )
    first = rpc("SendMessage", user_message("paint it", f"ask-{uuid.uuid4()}"), agent="push-ask")
    task = first["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    path = new_path()
    created = rpc(
        "CreateTaskPushNotificationConfig",
        {"taskId": task["id"], "url": receiver.url(path), "token": "later"},
        agent="push-ask",
    )["result"]
    assert created["taskId"] == task["id"]

    answer = rpc(
        "SendMessage", user_message("blue", f"ask-{uuid.uuid4()}", taskId=task["id"]), agent="push-ask"
    )
    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"

    got = receiver.wait_for(path, 3)
    bodies = [json.loads(r["body"]) for r in got]
    # Events 1-2 happened before the config existed; the rest arrive in order.
    assert [r["headers"]["X-A2A-Event-Id"] for r in got] == [f"{task['id']}:{seq}" for seq in (3, 4, 5)]
    assert bodies == stored_payloads(task["id"])[2:]
    assert bodies[1]["artifactUpdate"]["artifact"]["parts"] == [{"text": "Colour: blue"}]
    assert bodies[2]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert all(r["headers"]["X-A2A-Notification-Token"] == "later" for r in got)


def test_a_deleted_config_gets_no_more_events(rpc, stored, receiver):
    Agent.objects.get_or_create(
        tenant=Tenant.objects.get(slug="demo"),
        slug="push-ask",
        defaults={"name": "push-ask", "handler": "push-ask", "visibility": Agent.Visibility.PUBLIC},
    )
    path = new_path()
    push = {"url": receiver.url(path), "id": "short-lived", "_agent": "push-ask"}
    task = send_with_push(rpc, "paint it", push)["result"]["task"]
    assert len(receiver.wait_for(path, 2)) == 2
    rpc("DeleteTaskPushNotificationConfig", {"taskId": task["id"], "id": "short-lived"}, agent="push-ask")
    rpc("SendMessage", user_message("red", f"ask-{uuid.uuid4()}", taskId=task["id"]), agent="push-ask")
    time.sleep(0.5)
    assert len(receiver.received(path)) == 2


def test_an_unresolvable_webhook_host_is_a_failed_delivery_that_is_retried(rpc, stored):
    task = send_with_push(rpc, "nowhere", {"url": "http://no-such-webhook-host.invalid/hook"})["result"][
        "task"
    ]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"  # the agent's work is not held up
    deadline = time.monotonic() + 15
    attempts = []
    while time.monotonic() < deadline:
        attempts = list(PushDelivery.objects.filter(config__task_id=task["id"], seq=1).order_by("attempt"))
        if len(attempts) >= 2 and attempts[0].status == PushDelivery.Status.FAILED:
            break
        time.sleep(0.1)
    assert len(attempts) >= 2, attempts
    assert attempts[0].status == PushDelivery.Status.FAILED
    assert "does not resolve" in attempts[0].error
    assert attempts[0].response_code is None


@pytest.mark.skipif(SERVICES_MODE, reason="the job for the rest runs on this process's embedded pool")
def test_a_delivery_job_sends_for_its_budget_then_queues_a_job_for_the_rest(rpc, stored, receiver, settings):
    """With no time to spare, a job makes one attempt and hands the config's other events on.

    Called here, in this process: the job of the rest runs on its embedded pool's
    control lane (each of them, again, one attempt); every event still arrives
    once and in order.
    """
    settings.PUSH_ALLOW_PRIVATE_NETWORKS = True
    settings.PUSH_JOB_BUDGET = 0.0
    sent = rpc("SendMessage", user_message("budget", f"budget-{uuid.uuid4()}"))["result"]["task"]
    task = Task.objects.get(pk=sent["id"])
    events = list(TaskEvent.objects.filter(task=task).order_by("seq"))
    path = new_path()
    config = PushConfig.objects.create(
        tenant_id=task.tenant_id, task=task, config_id="budget", url=receiver.url(path)
    )
    try:
        PushDelivery.objects.bulk_create(
            PushDelivery(config=config, event=event, seq=event.seq) for event in events
        )
        assert len(events) == 4
        assert push_deliver(config.pk, events[0].seq) == 1
        got = receiver.wait_for(path, len(events))
        assert [r["headers"]["X-A2A-Event-Id"] for r in got] == [f"{task.pk}:{e.seq}" for e in events]
        rows = wait_settled({"config": config})
        assert [(row.seq, row.attempt, row.status) for row in rows] == [
            (event.seq, 1, "succeeded") for event in events
        ]
    finally:
        config.delete()
