"""The official a2a-sdk client on all three bindings, every method, the same flows.

Each test runs over JSON-RPC, HTTP+JSON and gRPC: the client reads the agent's
card and picks the interface of the binding it is told to use, as any A2A
client does. What only one binding has (gRPC status details, REST paths,
JSON-RPC codes) is tested in that binding's own module.
"""

import asyncio

import grpc
import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.client.auth import AuthInterceptor
from a2a.helpers import get_message_text
from a2a.types import a2a_pb2 as pb

from agents.builtin.clarify import QUESTION
from tests.api import tenancy
from tests.tasks_app.test_grpc_binding import STATE, Token, final_state, user_text
from tests.tasks_app.webhooks import Receiver

trio = tenancy.trio
BINDINGS = ["JSONRPC", "HTTP+JSON", "GRPC"]


@pytest.fixture
def acme_token(trio) -> str:
    """A token made through the ORM here, outside the tests' event loop."""
    return trio.token("acme")


async def sdk_client(url: str, binding: str, *, streaming=True, polling=False, token: str | None = None):
    config = ClientConfig(
        streaming=streaming,
        polling=polling,
        supported_protocol_bindings=[binding],
        httpx_client=httpx.AsyncClient(timeout=30),
        grpc_channel_factory=grpc.aio.insecure_channel,
    )
    interceptors = [AuthInterceptor(Token(token))] if token else None
    return await create_client(url, client_config=config, interceptors=interceptors)


async def send(client, request) -> list:
    return [event async for event in client.send_message(request)]


@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize("streaming", [False, True], ids=["blocking", "streaming"])
async def test_send_get_and_list(server, binding, streaming):
    client = await sdk_client(server.agent_url("echo"), binding, streaming=streaming)
    try:
        events = await send(client, user_text(f"over {binding}"))
        task_id = events[0].task.id
        fetched = await client.get_task(pb.GetTaskRequest(id=task_id, history_length=1))
        listed = await client.list_tasks(pb.ListTasksRequest(context_id=fetched.context_id))
    finally:
        await client.close()
    if streaming:
        kinds = [event.WhichOneof("payload") for event in events]
        assert kinds[0] == "task" and "artifact_update" in kinds, kinds
    assert final_state(events) == STATE.TASK_STATE_COMPLETED
    assert fetched.status.state == STATE.TASK_STATE_COMPLETED
    assert f"over {binding}" in fetched.artifacts[0].parts[0].text
    assert len(fetched.history) == 1
    assert [task.id for task in listed.tasks] == [task_id]
    assert listed.total_size == 1


@pytest.mark.parametrize("binding", BINDINGS)
async def test_the_clarify_round_trip(server, binding):
    client = await sdk_client(server.agent_url("clarify"), binding)
    try:
        first = await send(client, user_text("Plan a team offsite"))
        task = first[0].task
        asked = first[-1].status_update.status if first[-1].HasField("status_update") else task.status
        assert asked.state == STATE.TASK_STATE_INPUT_REQUIRED
        assert get_message_text(asked.message) == QUESTION
        reply = user_text("Twelve people, two days", task_id=task.id, context_id=task.context_id)
        second = await send(client, reply)
        done = await client.get_task(pb.GetTaskRequest(id=task.id))
    finally:
        await client.close()
    assert final_state(second) == STATE.TASK_STATE_COMPLETED
    assert done.status.state == STATE.TASK_STATE_COMPLETED
    text = done.artifacts[-1].parts[0].text
    assert "Plan a team offsite" in text and "Twelve people, two days" in text


@pytest.mark.parametrize("binding", BINDINGS)
async def test_subscribe_to_a_running_task_until_it_completes(server, binding):
    starter = await sdk_client(server.agent_url("progress"), binding, streaming=False, polling=True)
    subscriber = await sdk_client(server.agent_url("progress"), binding)
    try:
        started = await send(starter, user_text("subscribe to me"))
        task_id = started[0].task.id
        assert started[0].task.status.state in (STATE.TASK_STATE_SUBMITTED, STATE.TASK_STATE_WORKING)
        events = [event async for event in subscriber.subscribe(pb.SubscribeToTaskRequest(id=task_id))]
    finally:
        await starter.close()
        await subscriber.close()
    # The current Task first, then live events up to the final status.
    assert events[0].HasField("task") and events[0].task.id == task_id
    assert final_state(events) == STATE.TASK_STATE_COMPLETED


@pytest.mark.parametrize("binding", BINDINGS)
async def test_cancel_a_running_task(server, binding):
    client = await sdk_client(server.agent_url("progress"), binding, streaming=False, polling=True)
    try:
        started = await send(client, user_text("cancel me"))
        task_id = started[0].task.id
        canceled = await client.cancel_task(pb.CancelTaskRequest(id=task_id))
        for _ in range(50):
            fetched = await client.get_task(pb.GetTaskRequest(id=task_id))
            if fetched.status.state == STATE.TASK_STATE_CANCELED:
                break
            await asyncio.sleep(0.1)
    finally:
        await client.close()
    assert canceled.id == task_id
    assert fetched.status.state == STATE.TASK_STATE_CANCELED


@pytest.mark.parametrize("binding", BINDINGS)
async def test_push_configs_and_the_webhook_gets_the_events(server, binding):
    receiver = Receiver()
    receiver.thread.start()
    path = f"/{binding.lower().replace('+', '-')}-hook"
    client = await sdk_client(server.agent_url("clarify"), binding)
    try:
        task = (await send(client, user_text("Book a room")))[0].task
        config = pb.TaskPushNotificationConfig(task_id=task.id, id="hook", url=receiver.url(path))
        config.token = f"tok-{binding}"
        created = await client.create_task_push_notification_config(config)
        got = await client.get_task_push_notification_config(
            pb.GetTaskPushNotificationConfigRequest(task_id=task.id, id="hook")
        )
        listed = await client.list_task_push_notification_configs(
            pb.ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        await send(client, user_text("For six", task_id=task.id, context_id=task.context_id))
        delivered = receiver.wait_for(path, 1)
        await client.delete_task_push_notification_config(
            pb.DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="hook")
        )
        after = await client.list_task_push_notification_configs(
            pb.ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
    finally:
        await client.close()
        receiver.server.shutdown()
        receiver.server.server_close()
    assert (created.id, created.task_id, created.url) == ("hook", task.id, receiver.url(path))
    # The token is a secret: stored for delivery, never answered.
    assert created.token == "" and got == created
    assert [c.id for c in listed.configs] == ["hook"]
    assert delivered[0]["headers"]["X-A2A-Notification-Token"] == f"tok-{binding}"
    assert list(after.configs) == []


@pytest.mark.parametrize("binding", BINDINGS)
async def test_the_extended_card_of_an_authenticated_agent(trio, acme_token, binding):
    url = f"{trio.base_url}/a2a/acme/vault/"
    client = await sdk_client(url, binding, token=acme_token)
    try:
        card = await client.get_extended_agent_card(pb.GetExtendedAgentCardRequest())
        sent = await send(client, user_text(f"vault over {binding}"))
    finally:
        await client.close()
    assert card.name == "Vault" and card.capabilities.extended_agent_card
    assert {i.protocol_binding for i in card.supported_interfaces} >= {"JSONRPC", "HTTP+JSON", "GRPC"}
    assert final_state(sent) == STATE.TASK_STATE_COMPLETED
