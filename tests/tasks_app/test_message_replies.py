"""An agent that answers with a Message and no task: the caller gets the Message, and no task.

The platform keeps a durable record of the exchange (a task row marked
Task.Reply.MESSAGE) that the console shows under its context and no A2A caller sees.
"""

import json
import threading
import time
import uuid

import httpx
import pytest
from a2a.types import Role, SendMessageRequest
from asgiref.sync import sync_to_async

from agents.models import Agent
from agents.registry import answers_with_task
from tasks_app.models import Message, Task, TaskEvent
from tasks_app.selectors import tasks_matching, tenant_tasks
from tenants.models import Tenant
from tests.conftest import user_message
from tests.sse import read_events, stream
from tests.tasks_app.test_message_ids import BINDINGS, sdk_client
from tests.tasks_app.webhooks import new_path

HEADERS = {"A2A-Version": "1.0"}


def _demo_agent(handler: str) -> str:
    """An agent of the demo tenant with a test handler (tests/handlers.py), at the handler's name."""
    Agent.objects.get_or_create(
        tenant=Tenant.objects.get(slug="demo"),
        slug=handler,
        defaults={"name": handler.title(), "handler": handler},
    )
    return handler


@pytest.fixture
def replier(stored) -> str:
    return _demo_agent("replier")


def _exchange(context_id: str) -> Task:
    return Task.objects.select_related("status_message").get(context__context_id=context_id)


@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize("streaming", [False, True], ids=["blocking", "streaming"])
async def test_sdk_client_gets_the_agents_message_and_no_task(server, replier, binding, streaming):
    from a2a.helpers import new_text_message

    context_id = f"quick-{uuid.uuid4()}"
    message = new_text_message("ping", context_id=context_id, role=Role.ROLE_USER)
    client = await sdk_client(server.agent_url(replier), binding, streaming=streaming)
    try:
        events = [event async for event in client.send_message(SendMessageRequest(message=message))]
    finally:
        await client.close()
    assert [event.WhichOneof("payload") for event in events] == ["message"]
    reply = events[0].message
    assert reply.role == Role.ROLE_AGENT
    assert reply.parts[0].text == "You said: ping"
    assert reply.context_id == context_id
    assert reply.task_id == ""
    record = await sync_to_async(_exchange)(context_id)
    assert record.is_message_exchange and record.status_message.message_id == reply.message_id


def test_json_rpc_and_rest_answer_message_and_hide_the_record(server, rpc, replier):
    context_id = f"quick-{uuid.uuid4()}"
    answer = rpc(
        "SendMessage", user_message("hello", f"m-{uuid.uuid4()}", contextId=context_id), agent=replier
    )
    assert list(answer["result"]) == ["message"]
    assert answer["result"]["message"]["parts"] == [{"text": "You said: hello"}]
    assert "taskId" not in answer["result"]["message"]
    record = _exchange(context_id)
    # The record is no task to the caller: not found, not listed, not subscribable, not continued.
    assert rpc("GetTask", {"id": str(record.pk)}, agent=replier)["error"]["code"] == -32001
    assert rpc("ListTasks", {"contextId": context_id}, agent=replier)["result"]["tasks"] == []
    assert rpc("SubscribeToTask", {"id": str(record.pk)}, agent=replier)["error"]["code"] == -32001
    follow_up = user_message("more", f"m-{uuid.uuid4()}", taskId=str(record.pk))
    assert rpc("SendMessage", follow_up, agent=replier)["error"]["code"] == -32001

    rest = httpx.post(
        server.agent_url(replier) + "rest/message:send",
        json=user_message("over rest", f"m-{uuid.uuid4()}"),
        headers=HEADERS,
        timeout=30,
    )
    assert rest.status_code == 200 and list(rest.json()) == ["message"]
    assert rest.json()["message"]["parts"] == [{"text": "You said: over rest"}]


def test_a_stream_carries_that_one_message(server, replier):
    body = {"jsonrpc": "2.0", "id": 7, "method": "SendStreamingMessage"}
    body["params"] = user_message("streamed", f"m-{uuid.uuid4()}")
    with stream(server.agent_url(replier), body) as response:
        events = list(read_events(response))
    assert [list(event["data"]["result"]) for event in events] == [["message"]]
    assert events[0]["data"]["id"] == 7
    with stream(server.agent_url(replier) + "rest/message:stream", user_message("rest", "m-r")) as response:
        rest_events = list(read_events(response))
    assert [list(event["data"]) for event in rest_events] == [["message"]]
    # The log keeps the accepted Task first (durability), then the reply.
    record = _exchange(rest_events[0]["data"]["message"]["contextId"])
    kinds = list(TaskEvent.objects.filter(task=record).order_by("seq").values_list("kind", flat=True))
    assert kinds == ["task", "message"]


def test_the_built_in_handlers_that_always_make_a_task_say_so():
    assert all(answers_with_task(name) for name in ("echo", "clarify", "approval", "progress"))
    # A remote agent may answer with a Message alone; a handler that is not installed says nothing.
    assert not answers_with_task("a2a_proxy")
    assert not answers_with_task("no-such-handler")


@pytest.fixture
def gated(stored) -> str:
    return _demo_agent("gated")


@pytest.mark.parametrize("path", ["", "rest/message:stream"], ids=["jsonrpc", "rest"])
def test_an_agent_that_answers_with_a_task_has_its_task_streamed_before_its_first_event(
    server, gated, tmp_path, path
):
    """A handler declaring answers_with_task: the accepted Task is the stream's first event at
    once, while the agent has said nothing yet; a Message it sends anyway completes the task."""
    gate = tmp_path / f"gate-{uuid.uuid4().hex}"
    params = user_message(str(gate), f"m-{uuid.uuid4()}")
    body = {"jsonrpc": "2.0", "id": 3, "method": "SendStreamingMessage", "params": params}
    unwrap = (lambda data: data) if path else (lambda data: data["result"])
    with stream(server.agent_url(gated) + path, params if path else body) as response:
        events = read_events(response)
        first = next(events)
        task = unwrap(first["data"])["task"]
        assert first["id"] == "1"
        assert task["status"]["state"] == "TASK_STATE_SUBMITTED"
        # The agent waits for the gate: nothing of it is stored or streamed yet.
        stored_task = Task.objects.get(pk=task["id"])
        assert stored_task.event_seq == 1 and stored_task.reply == Task.Reply.TASK
        gate.touch()
        rest = [unwrap(event["data"]) for event in events]
    assert [list(payload) for payload in rest] == [["statusUpdate"]]
    status = rest[0]["statusUpdate"]["status"]
    assert status["state"] == "TASK_STATE_COMPLETED"
    assert status["message"]["parts"] == [{"text": f"Gate {gate.name} opened"}]
    stored_task.refresh_from_db()
    assert not stored_task.is_message_exchange and stored_task.state == "completed"


def test_the_console_shows_the_exchange_under_its_context(rpc, replier):
    context_id = f"quick-{uuid.uuid4()}"
    rpc(
        "SendMessage",
        user_message("for the console", f"m-{uuid.uuid4()}", contextId=context_id),
        agent=replier,
    )
    (shown,) = tasks_matching(tenant_tasks(Tenant.objects.get(slug="demo")), context_id=context_id)
    texts = [m.parts[0]["text"] for m in Message.objects.filter(task=shown).order_by("created_at", "pk")]
    assert texts == ["for the console", "You said: for the console"]


def test_return_immediately_answers_with_the_task_the_reply_then_completes(rpc, replier):
    params = {**user_message("later", f"m-{uuid.uuid4()}"), "configuration": {"returnImmediately": True}}
    task = rpc("SendMessage", params, agent=replier)["result"]["task"]
    for _ in range(100):
        fetched = rpc("GetTask", {"id": task["id"]}, agent=replier)["result"]
        if fetched["status"]["state"] == "TASK_STATE_COMPLETED":
            break
        time.sleep(0.05)
    assert fetched["status"]["state"] == "TASK_STATE_COMPLETED"
    assert fetched["status"]["message"]["parts"] == [{"text": "You said: later"}]


def test_a_send_with_a_push_config_keeps_the_task_its_webhook_was_shown(rpc, replier, receiver):
    # The webhook gets the Task itself first: its receiver holds the id from then on, so the
    # agent's Message completes that task instead of making it an exchange GetTask no longer finds.
    path = new_path()
    params = {
        **user_message("pushed", f"m-{uuid.uuid4()}"),
        "configuration": {"taskPushNotificationConfig": {"url": receiver.url(path)}},
    }
    answer = rpc("SendMessage", params, agent=replier)["result"]
    shown = json.loads(receiver.wait_for(path, 1)[0]["body"])["task"]

    assert answer["task"]["id"] == shown["id"]
    fetched = rpc("GetTask", {"id": shown["id"]}, agent=replier)["result"]
    assert fetched["status"]["state"] == "TASK_STATE_COMPLETED"
    assert fetched["status"]["message"]["parts"] == [{"text": "You said: pushed"}]


def test_a_retry_with_the_idempotency_key_gets_the_same_message(rpc, replier):
    params = user_message("once", f"m-{uuid.uuid4()}")
    headers = {"Idempotency-Key": f"k-{uuid.uuid4()}"}
    first = rpc("SendMessage", params, agent=replier, headers=headers)["result"]
    again = rpc("SendMessage", params, agent=replier, headers=headers)["result"]
    assert again == first and "message" in first


def test_a_resent_stream_of_an_exchange_not_yet_answered_shows_no_task_before_the_message(
    server, stored, tmp_path
):
    """A streaming send with an Idempotency-Key whose stream dropped before the agent spoke, sent
    again: the agent's Message is the whole answer, as the first stream would have had it."""
    agent = _demo_agent("gated-open")
    gate = tmp_path / f"gate-{uuid.uuid4().hex}"
    params = user_message(str(gate), f"m-{uuid.uuid4()}")
    body = {"jsonrpc": "2.0", "id": 4, "method": "SendStreamingMessage", "params": params}
    key = {"Idempotency-Key": f"resend-{uuid.uuid4()}"}
    with stream(server.agent_url(agent), body, headers=key) as response:
        assert response.status_code == 200  # accepted; the connection drops here
    with stream(server.agent_url(agent), body, headers=key) as response:
        time.sleep(0.5)  # the resend's stream is open while the agent still waits
        gate.touch()
        resent = [event["data"]["result"] for event in read_events(response)]

    assert [list(payload) for payload in resent] == [["message"]]
    assert resent[0]["message"]["parts"] == [{"text": f"Gate {gate.name} opened"}]
    assert "taskId" not in resent[0]["message"]


@pytest.fixture
def short_wait(server, db_settings, log_dir):
    """A web process whose blocking calls wait one second (the session's worker runs its turns)."""
    from tests.live import start_web

    web = start_web(db_settings, log_dir, name="web-short-wait", extra_env={"A2A_BLOCKING_TIMEOUT": "1"})
    yield web
    web.stop()


def test_a_task_a_blocking_send_showed_at_its_timeout_stays_a_task(short_wait, stored, tmp_path):
    """The agent had not spoken when the blocking call gave up waiting and answered with the
    task: the caller holds its id now, so the agent's later Message completes that task
    instead of making it a message exchange that GetTask no longer finds."""
    agent = _demo_agent("gated-open")
    gate = tmp_path / f"gate-{uuid.uuid4().hex}"
    url = short_wait.agent_url(agent)

    def call(method: str, params: dict) -> dict:
        body = {"jsonrpc": "2.0", "id": 5, "method": method, "params": params}
        return httpx.post(url, json=body, headers=HEADERS, timeout=30).json()

    shown = call("SendMessage", user_message(str(gate), f"m-{uuid.uuid4()}"))["result"]["task"]
    assert shown["status"]["state"] == "TASK_STATE_SUBMITTED"
    gate.touch()
    deadline = time.monotonic() + 30
    while Task.objects.get(pk=shown["id"]).state != "completed":
        assert time.monotonic() < deadline, "the agent never answered"
        time.sleep(0.1)

    found = call("GetTask", {"id": shown["id"]})
    assert "result" in found, found
    assert found["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert found["result"]["status"]["message"]["parts"] == [{"text": f"Gate {gate.name} opened"}]


def test_list_tasks_leaves_out_a_task_its_caller_has_not_been_shown(server, stored, tmp_path):
    """A blocking call waits for the agent's first word: its task is no task yet to the caller,
    and an agent that answers with a Message alone makes it an exchange no list shows."""
    agent = _demo_agent("gated-open")
    gate = tmp_path / f"gate-{uuid.uuid4().hex}"
    context_id = f"ctx-{uuid.uuid4()}"

    def call(method: str, params: dict) -> dict:
        body = {"jsonrpc": "2.0", "id": 6, "method": method, "params": params}
        return httpx.post(server.agent_url(agent), json=body, headers=HEADERS, timeout=30).json()

    answers = []
    params = user_message(str(gate), f"m-{uuid.uuid4()}", contextId=context_id)
    sending = threading.Thread(target=lambda: answers.append(call("SendMessage", params)))
    sending.start()
    deadline = time.monotonic() + 10
    while not Task.objects.filter(context__context_id=context_id).exists():
        assert time.monotonic() < deadline, "the send stored no task"
        time.sleep(0.05)

    waiting = call("ListTasks", {"contextId": context_id})["result"]
    gate.touch()
    sending.join(30)
    assert (waiting.get("tasks", []), waiting["totalSize"]) == ([], 0)
    assert "message" in answers[0]["result"]
    assert call("ListTasks", {"contextId": context_id})["result"].get("tasks", []) == []


def test_a_task_whose_agent_spoke_or_that_was_canceled_first_is_listed(server, stored, tmp_path):
    """Once the agent's first word is not a bare Message (a status) the caller is shown a task,
    and ListTasks lists it; so too a task canceled before the agent's first word."""
    asker = _demo_agent("ask-then-gate")
    context_id = f"ctx-{uuid.uuid4()}"

    def call(agent: str, method: str, params: dict) -> dict:
        body = {"jsonrpc": "2.0", "id": 8, "method": method, "params": params}
        return httpx.post(server.agent_url(agent), json=body, headers=HEADERS, timeout=30).json()

    blocking = call(asker, "SendMessage", user_message("start", f"m-{uuid.uuid4()}", contextId=context_id))
    assert blocking["result"]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    streamed = {"jsonrpc": "2.0", "id": 9, "method": "SendStreamingMessage"}
    streamed["params"] = user_message("start", f"m-{uuid.uuid4()}", contextId=context_id)
    with stream(server.agent_url(asker), streamed) as response:
        streamed_id = list(read_events(response))[-1]["data"]["result"]["statusUpdate"]["taskId"]
    listed = call(asker, "ListTasks", {"contextId": context_id})["result"]
    assert sorted(task["id"] for task in listed["tasks"]) == sorted(
        [blocking["result"]["task"]["id"], streamed_id]
    )
    assert listed["totalSize"] == 2

    # Canceled while its blocking call waits for the agent's first word (the gate).
    gated = _demo_agent("gated-open")
    gate = tmp_path / f"gate-{uuid.uuid4().hex}"
    other_context = f"ctx-{uuid.uuid4()}"
    answers = []
    params = user_message(str(gate), f"m-{uuid.uuid4()}", contextId=other_context)
    sending = threading.Thread(target=lambda: answers.append(call(gated, "SendMessage", params)))
    sending.start()
    try:
        deadline = time.monotonic() + 10
        while not Task.objects.filter(context__context_id=other_context).exists():
            assert time.monotonic() < deadline, "the send stored no task"
            time.sleep(0.05)
        task_id = str(Task.objects.get(context__context_id=other_context).pk)
        assert (
            call(gated, "CancelTask", {"id": task_id})["result"]["status"]["state"] == "TASK_STATE_CANCELED"
        )
    finally:
        gate.touch()
        sending.join(30)
    assert answers[0]["result"]["task"]["status"]["state"] == "TASK_STATE_CANCELED"
    listed = call(gated, "ListTasks", {"contextId": other_context})["result"]
    assert [task["id"] for task in listed["tasks"]] == [task_id]
