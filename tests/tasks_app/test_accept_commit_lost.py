"""A write whose COMMIT gets no answer: stored after all is accepted, never answered as an error.

Sends, cancels and new webhook configs (tasks_app/commits.py).

The database can go away between committing the accept's transaction and
telling the web so (a restart, a dropped connection). The web cannot tell
from the error whether the COMMIT went through. Answered "nothing was
stored" (503) when it had been, the caller sent it again and got a second
task. A proxy on loopback between one web process and PostgreSQL cuts that
web's connection at the COMMIT of its first send, after passing it on (the
task is stored) or before (nothing is).
"""

import time
import uuid

import httpx
import pytest
from django.conf import settings

from agents.models import Agent
from tasks_app.dispatch import redis_client
from tasks_app.events import cancel_group_name
from tasks_app.models import DraftTaskAlias, Message, PushConfig, Task, TaskEvent
from tenants.models import AuditEvent, Tenant
from tests.api import tenancy
from tests.conftest import SERVICES_MODE, rpc_to, user_message
from tests.cutter import ACCEPT, PUSH_CONFIG, CommitCutter
from tests.live import start_web

trio = tenancy.trio  # the tenants, people and tokens of the API tests

pytestmark = pytest.mark.skipif(not SERVICES_MODE, reason="a COMMIT lost on the way back needs PostgreSQL")

HEADERS = {"A2A-Version": "1.0"}


def _web_through_cutter(db_settings, log_dir, name: str, extra_env: dict | None = None):
    """A web process whose database connections go through a CommitCutter; the session's worker runs turns.

    It waits a second for a connection (DB_POOL_TIMEOUT), so it gives up on an absent store within
    the 8 s its look for a COMMIT's outcome takes.
    """
    cutter = CommitCutter(db_settings.get("HOST") or "127.0.0.1", int(db_settings.get("PORT") or 5432))
    through = {**db_settings, "HOST": "127.0.0.1", "PORT": cutter.port}
    web = start_web(through, log_dir, name=name, extra_env={"DB_POOL_TIMEOUT": "1", **(extra_env or {})})
    yield web, cutter
    web.stop()
    cutter.close()


@pytest.fixture
def cut_web(server, db_settings, log_dir):
    yield from _web_through_cutter(db_settings, log_dir, "web-commit-cut")


@pytest.fixture
def held_web(server, db_settings, log_dir):
    """So, and the server ends its sessions once idle in a transaction for 3 s
    (DB_IDLE_IN_TRANSACTION_TIMEOUT), within the 5 s the web looks for a COMMIT's outcome."""
    yield from _web_through_cutter(
        db_settings, log_dir, "web-commit-held", {"DB_IDLE_IN_TRANSACTION_TIMEOUT": "3"}
    )


def _send_cut(cut_web, mode: str, body: dict | None = None) -> tuple[httpx.Response, str]:
    """A SendMessage (or `body`) to echo through a web whose COMMIT is cut (CommitCutter's `mode`)."""
    web, cutter = cut_web
    message_id = f"m-{uuid.uuid4()}"
    cutter.arm(mode)
    body = body or {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": user_message("hello", message_id),
    }
    # An older dialect's method (its name has a '/') is sent without the 1.0 header.
    headers = {} if "/" in body["method"] else HEADERS
    response = httpx.post(web.agent_url("echo"), json=body, headers=headers, timeout=30)
    assert cutter.cut.is_set(), "the web's COMMIT never went through the proxy"
    return response, message_id


def _unavailable(response: httpx.Response) -> str:
    """The message of a store-unavailable answer: -32603 with HTTP 503."""
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["code"] == -32603
    return error["message"]


def test_a_send_whose_commit_went_through_unanswered_is_accepted_and_runs(cut_web, stored):
    response, message_id = _send_cut(cut_web, "after")

    assert response.status_code == 200, response.text
    task = response.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["history"][0]["messageId"] == message_id
    # Stored once, and its turn ran: the answer is the stored task.
    assert Message.objects.filter(message_id=message_id).count() == 1
    assert Task.objects.get(pk=task["id"]).state == "completed"


def test_a_send_whose_commit_arrives_after_the_web_lost_its_connection_is_accepted(cut_web, stored):
    # The web's look for the message comes before the COMMIT is done: it waits for the session
    # that was committing to finish, then finds the message (it was answered "nothing was stored").
    response, message_id = _send_cut(cut_web, "late")

    assert cut_web[1].asked.is_set(), "the web never asked whether the committing session was done"
    assert response.status_code == 200, response.text
    assert response.json()["result"]["task"]["history"][0]["messageId"] == message_id
    assert Message.objects.filter(message_id=message_id).count() == 1


def test_a_draft_task_named_by_its_client_whose_commit_went_through_unanswered_is_accepted(cut_web, stored):
    # The draft dialect stores the client's name for its task with it, in the same transaction.
    client_task_id = f"draft-{uuid.uuid4()}"
    params = {
        "id": client_task_id,
        "message": {"role": "user", "parts": [{"type": "TextPart", "text": "hi"}]},
    }
    response, _ = _send_cut(
        cut_web, "after", {"jsonrpc": "2.0", "id": 2, "method": "tasks/send", "params": params}
    )

    assert response.status_code == 200, response.text
    task = response.json()["result"]
    assert task["id"] == client_task_id
    assert task["status"]["state"] == "completed"
    assert DraftTaskAlias.objects.filter(client_task_id=client_task_id).count() == 1


def test_a_send_whose_commit_never_arrived_stored_nothing_and_says_so(cut_web, stored):
    response, message_id = _send_cut(cut_web, "before")

    assert "nothing was stored" in _unavailable(response)
    assert not Message.objects.filter(message_id=message_id).exists()


def test_a_send_whose_commit_went_through_as_the_database_stayed_away_says_it_may_be_stored(cut_web, stored):
    response, message_id = _send_cut(cut_web, "after, and away")

    # The web could not ask the store whether the COMMIT went through: it says it may have. Sent
    # without an Idempotency-Key, a retry would be stored again: it says to look for it first.
    said = _unavailable(response)
    assert "it may have been" in said and "nothing was stored" not in said
    assert "Look for it" in said and "same Idempotency-Key" not in said
    # It was, and its turn was dispatched all the same: the task runs to its end.
    stored_message = Message.objects.get(message_id=message_id)
    deadline = time.monotonic() + 30
    while Task.objects.get(pk=stored_message.task_id).state != "completed":
        assert time.monotonic() < deadline, "the stored turn never ran"
        time.sleep(0.1)


def _waiting_task(web) -> str:
    """A task of the demo tenant's clarify-cut agent, waiting for input."""
    Agent.objects.update_or_create(
        tenant=Tenant.objects.get(slug="demo"),
        slug="clarify-cut",
        defaults={"name": "clarify-cut", "handler": "clarify", "visibility": Agent.Visibility.PUBLIC},
    )
    params = user_message("Plan the offsite", f"m-{uuid.uuid4()}")
    task = rpc_to(web, "SendMessage", params, agent="clarify-cut")["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    return task["id"]


def _call_cut(
    cut_web, mode: str, method: str, params: dict, marker: bytes = ACCEPT, agent: str = "clarify-cut"
) -> httpx.Response:
    """A JSON-RPC call to `agent` through a web whose COMMIT of what it writes is cut."""
    web, cutter = cut_web
    cutter.arm(mode, marker)
    body = {"jsonrpc": "2.0", "id": 3, "method": method, "params": params}
    # An older dialect's method (its name has a '/') is sent without the 1.0 header.
    headers = {} if "/" in method else HEADERS
    response = httpx.post(web.agent_url(agent), json=body, headers=headers, timeout=30)
    assert cutter.cut.is_set(), f"the web's COMMIT never went through the proxy: {response.text}"
    return response


def _cancel_cut(cut_web, mode: str) -> tuple[httpx.Response, str]:
    """A CancelTask of a task waiting for input, through a web whose COMMIT of the cancel is cut."""
    task_id = _waiting_task(cut_web[0])
    return _call_cut(cut_web, mode, "CancelTask", {"id": task_id}), task_id


def _canceled_once(task_id: str) -> bool:
    entries = TaskEvent.objects.filter(
        task_id=task_id, payload__statusUpdate__status__state="TASK_STATE_CANCELED"
    )
    return Task.objects.get(pk=task_id).state == "canceled" and entries.count() == 1


def test_a_cancel_whose_commit_went_through_unanswered_is_answered_as_done(cut_web, stored):
    response, task_id = _cancel_cut(cut_web, "after")

    # Stored, so answered as done: not "nothing was stored" (a retry would be told it is not cancelable).
    assert response.status_code == 200, response.text
    assert response.json()["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert _canceled_once(task_id)


def test_a_cancel_whose_commit_went_through_as_the_database_stayed_away_says_it_may_be_stored(
    cut_web, stored
):
    response, task_id = _cancel_cut(cut_web, "after, and away")

    said = _unavailable(response)
    assert "it may have been" in said and "nothing was stored" not in said
    assert _canceled_once(task_id)


def test_a_0_3_cancel_whose_commit_went_through_as_the_database_stayed_away_says_it_may_be_stored(
    cut_web, stored
):
    # The older dialects answer a store outage as the 1.0 bindings do: 503, Retry-After, and
    # whether it may have been stored (it was "Internal error" with HTTP 200).
    task_id = _waiting_task(cut_web[0])
    response = _call_cut(cut_web, "after, and away", "tasks/cancel", {"id": task_id})

    said = _unavailable(response)
    assert "it may have been" in said
    assert response.headers["Retry-After"] == "5"
    assert _canceled_once(task_id)


def test_an_operator_cancel_whose_commit_went_through_unanswered_is_done(cut_web, trio):
    # The management API's cancel (the console's too) stores the cancel and its audit record in
    # one transaction: its COMMIT is checked as an A2A cancel's is (it was answered 500).
    web, cutter = cut_web
    bob = trio.token("acme", [*tenancy.ALL_SCOPES], user="bob")
    task_id = tenancy.waiting_task(trio)
    tenancy.set_state(task_id, "input-required")
    cutter.arm("after")
    url = f"{web.base_url}/api/v1/tenants/acme/tasks/{task_id}/cancel/"
    response = httpx.post(url, headers=trio.auth(bob), timeout=30)

    assert cutter.cut.is_set(), f"the web's COMMIT never went through the proxy: {response.text}"
    assert response.status_code == 200, response.text
    assert response.json()["state"] == "canceled"
    assert _canceled_once(task_id)
    assert AuditEvent.objects.filter(action="task.cancel", target_id=task_id).count() == 1


def test_a_cancel_whose_commit_was_lost_on_the_way_frees_its_task(held_web, stored):
    # A partition: the COMMIT never reaches the server, and the server is not told. Its session
    # waits in its transaction holding the task's row, so the turn and every cancel would wait
    # behind it until PostgreSQL's keepalives ended it (two hours by default). The server ends it
    # once idle that long (DB_IDLE_IN_TRANSACTION_TIMEOUT). With a limit under the web's 5 s look,
    # as here, the web sees it end and says that nothing was stored; with the default 60 s, it says
    # the cancel may have been stored, and the row is free a minute later.
    response, task_id = _cancel_cut(held_web, "held")

    assert "nothing was stored" in _unavailable(response)
    assert held_web[1].ended.wait(2), "the server never ended the session holding the task"
    assert not TaskEvent.objects.filter(
        task_id=task_id, payload__statusUpdate__status__state="TASK_STATE_CANCELED"
    ).exists()
    # The task's row is free: the client's retry cancels it.
    body = {"jsonrpc": "2.0", "id": 4, "method": "CancelTask", "params": {"id": task_id}}
    response = httpx.post(held_web[0].agent_url("clarify-cut"), json=body, headers=HEADERS, timeout=10)
    assert response.status_code == 200, response.text
    assert response.json()["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert _canceled_once(task_id)


def test_a_cancel_that_may_not_be_stored_does_not_stop_the_running_turn(cut_web, stored, tmp_path):
    # A cancel whose COMMIT never arrived, the database away since: the web cannot tell whether
    # it was stored, so of what was to follow it only the dispatches that read the store run.
    # Neither its CANCELED entry nor the order to stop the running turn is published.
    web, _ = cut_web
    Agent.objects.update_or_create(
        tenant=Tenant.objects.get(slug="demo"),
        slug="ask-then-gate",
        defaults={"name": "ask-then-gate", "handler": "ask-then-gate", "visibility": Agent.Visibility.PUBLIC},
    )
    task = rpc_to(web, "SendMessage", user_message("start", f"m-{uuid.uuid4()}"), agent="ask-then-gate")
    task = task["result"]["task"]
    gate = tmp_path / "gate"
    params = user_message(str(gate), f"m-{uuid.uuid4()}", taskId=task["id"], contextId=task["contextId"])
    params["configuration"] = {"returnImmediately": True}
    rpc_to(web, "SendMessage", params, agent="ask-then-gate")
    deadline = time.monotonic() + 20
    # The turn's watcher listens for a cancel (it subscribes to its task's cancel group in Redis).
    redis = redis_client(settings.REDIS_URL)
    while not redis.pubsub_channels(f"*{cancel_group_name(task['id'])}*"):
        assert time.monotonic() < deadline, "the turn's watcher never listened for a cancel"
        time.sleep(0.05)

    response = _call_cut(cut_web, "before, and away", "CancelTask", {"id": task["id"]}, agent="ask-then-gate")

    said = _unavailable(response)
    assert "it may have been" in said and "nothing was stored" not in said
    time.sleep(1)  # a stop order, had one been published, has reached the turn
    gate.touch()
    deadline = time.monotonic() + 30
    while Task.objects.get(pk=task["id"]).state == "working":
        assert time.monotonic() < deadline, "the turn never finished"
        time.sleep(0.1)
    assert Task.objects.get(pk=task["id"]).state == "completed"
    assert not TaskEvent.objects.filter(
        task_id=task["id"], payload__statusUpdate__status__state="TASK_STATE_CANCELED"
    ).exists()


def test_a_new_webhook_config_whose_commit_went_through_unanswered_is_answered_as_stored(cut_web, stored):
    # Without an id each CreateTaskPushNotificationConfig is a new config: answered "nothing was
    # stored", the client's retry added a second one, and every event went out twice.
    task_id = _waiting_task(cut_web[0])
    params = {"taskId": task_id, "url": "http://127.0.0.1:9/hook"}
    response = _call_cut(cut_web, "after", "CreateTaskPushNotificationConfig", params, marker=PUSH_CONFIG)

    assert response.status_code == 200, response.text
    config = response.json()["result"]
    assert config["taskId"] == task_id and config["url"] == params["url"]
    assert list(PushConfig.objects.filter(task_id=task_id).values_list("config_id", flat=True)) == [
        config["id"]
    ]
