"""A repeated messageId is a new message; contexts belong to the caller that started them.

Through the official a2a-sdk client on both bindings, and plain HTTP for what
the SDK does not send (a fixed messageId across unrelated requests, two callers).
"""

import secrets
import uuid
from datetime import timedelta

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.helpers import new_text_message
from a2a.types import ListTasksRequest, Role, SendMessageRequest, TaskState
from django.utils import timezone
from oauth2_provider.models import AccessToken, set_token_value

from tasks_app.models import Context, Task
from tenants.models import Application
from tests.api import tenancy
from tests.conftest import user_message

trio = tenancy.trio
BINDINGS = ["JSONRPC", "HTTP+JSON"]


def sdk_client(url: str, binding: str, *, streaming: bool = False, headers: dict | None = None):
    http = httpx.AsyncClient(headers=headers or {}, timeout=30)
    config = ClientConfig(streaming=streaming, httpx_client=http, supported_protocol_bindings=[binding])
    return create_client(url, client_config=config)


def fixed_id_request(text: str, message_id: str, **fields) -> SendMessageRequest:
    message = new_text_message(text, role=Role.ROLE_USER)
    message.message_id = message_id
    for name, value in fields.items():
        setattr(message, name, value)
    return SendMessageRequest(message=message)


async def send(client, request) -> list:
    return [event async for event in client.send_message(request)]


@pytest.mark.parametrize("binding", BINDINGS)
async def test_sdk_client_reusing_a_message_id_gets_a_new_task_each_time(server, stored, binding):
    message_id = f"reused-{uuid.uuid4()}"
    client = await sdk_client(server.agent_url("clarify"), binding)
    try:
        first = (await send(client, fixed_id_request("Plan a trip", message_id)))[0].task
        assert first.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        canceled = await client.cancel_task(_cancel(first.id))
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED
        # The same id again, on an unrelated request: a new task that asks for input,
        # not the task canceled before.
        second = (await send(client, fixed_id_request("Plan a party", message_id)))[0].task
    finally:
        await client.close()
    assert second.id != first.id
    assert second.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert second.history[0].parts[0].text == "Plan a party"


def _cancel(task_id: str):
    from a2a.types import CancelTaskRequest

    return CancelTaskRequest(id=task_id)


def test_the_printed_curl_body_works_on_every_agent_and_twice(rpc):
    # The banner's and README's examples all send messageId "msg-1".
    body = user_message("hi", "msg-1")
    answers = [rpc("SendMessage", body, agent=agent) for agent in ("echo", "echo", "approval", "clarify")]
    assert all("result" in answer for answer in answers), answers
    tasks = [answer["result"]["task"] for answer in answers]
    assert len({task["id"] for task in tasks}) == 4
    assert tasks[0]["status"]["state"] == tasks[1]["status"]["state"] == "TASK_STATE_COMPLETED"


def _second_client_token(trio) -> str:
    """A token of acme's second OAuth client: another caller of the same tenant."""
    raw = secrets.token_urlsafe(24)
    token = AccessToken(
        application=Application.objects.get(client_id=trio.clients["acme-second"].client_id),
        scope=" ".join(tenancy.ALL_SCOPES),
        expires=timezone.now() + timedelta(hours=1),
    )
    set_token_value(token, raw)
    token.save()
    return raw


def _rpc(trio, token: str, method: str, params: dict) -> dict:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    headers = {"A2A-Version": "1.0", **trio.auth(token)}
    return httpx.post(f"{trio.base_url}/a2a/acme/vault/", json=body, headers=headers, timeout=30).json()


def test_a_message_id_another_caller_used_is_neither_refused_nor_revealed(trio):
    mine, theirs = trio.token("acme"), _second_client_token(trio)
    message_id = f"claimed-{uuid.uuid4()}"
    first = _rpc(trio, theirs, "SendMessage", user_message("theirs", message_id))["result"]["task"]
    second = _rpc(trio, mine, "SendMessage", user_message("mine", message_id))["result"]["task"]
    assert second["id"] != first["id"]
    assert second["history"][0]["parts"] == [{"text": "mine"}]
    # And the other way round: the first caller still sees only its own task.
    assert _rpc(trio, mine, "GetTask", {"id": first["id"]})["error"]["code"] == -32001


def test_a_context_another_caller_started_is_not_joined_and_not_revealed(trio):
    mine, theirs = trio.token("acme"), _second_client_token(trio)
    context_id = f"ctx-{uuid.uuid4()}"
    started = _rpc(
        trio, theirs, "SendMessage", user_message("theirs", f"m-{uuid.uuid4()}", contextId=context_id)
    )
    joined = _rpc(trio, mine, "SendMessage", user_message("mine", f"m-{uuid.uuid4()}", contextId=context_id))
    theirs_task, my_task = started["result"]["task"], joined["result"]["task"]
    # Each caller's contextId is kept as sent, but they are two conversations.
    assert theirs_task["contextId"] == my_task["contextId"] == context_id
    assert Context.objects.filter(context_id=context_id).count() == 2
    assert Task.objects.get(pk=theirs_task["id"]).context_id != Task.objects.get(pk=my_task["id"]).context_id
    listed = _rpc(trio, mine, "ListTasks", {"contextId": context_id})["result"]
    assert [task["id"] for task in listed["tasks"]] == [my_task["id"]]
    # The agent of my task sees no trace of the other caller's conversation.
    assert len(my_task["history"]) == 2


def test_the_same_caller_continues_its_own_context(trio):
    token = trio.token("acme")
    context_id = f"ctx-{uuid.uuid4()}"
    first = _rpc(trio, token, "SendMessage", user_message("one", f"m-{uuid.uuid4()}", contextId=context_id))
    second = _rpc(trio, token, "SendMessage", user_message("two", f"m-{uuid.uuid4()}", contextId=context_id))
    first_task = Task.objects.get(pk=first["result"]["task"]["id"])
    second_task = Task.objects.get(pk=second["result"]["task"]["id"])
    assert first_task.context_id == second_task.context_id
    listed = _rpc(trio, token, "ListTasks", {"contextId": context_id})["result"]["tasks"]
    assert {task["id"] for task in listed} == {str(first_task.pk), str(second_task.pk)}


@pytest.mark.parametrize("binding", BINDINGS)
async def test_sdk_client_with_an_unknown_context_id_keeps_it(server, stored, binding):
    context_id = f"brand-new-{uuid.uuid4()}"
    client = await sdk_client(server.agent_url("echo"), binding)
    try:
        request = fixed_id_request("hi", f"m-{uuid.uuid4()}", context_id=context_id)
        task = (await send(client, request))[0].task
        listed = await client.list_tasks(ListTasksRequest(context_id=context_id))
    finally:
        await client.close()
    assert task.context_id == context_id
    assert [t.id for t in listed.tasks] == [task.id]
