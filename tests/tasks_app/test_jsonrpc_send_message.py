import uuid

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.helpers import new_text_message
from a2a.types import Role, SendMessageRequest, TaskState

from tasks_app.models import Task, TaskEvent
from tests.conftest import user_message


def new_id() -> str:
    return f"msg-{uuid.uuid4()}"


@pytest.mark.parametrize("streaming", [False, True], ids=["blocking", "streaming"])
async def test_sdk_client_gets_completed_echo_task(server, stored, streaming):
    client = await create_client(server.agent_url("echo"), client_config=ClientConfig(streaming=streaming))
    try:
        request = SendMessageRequest(message=new_text_message("hi", role=Role.ROLE_USER))
        events = [event async for event in client.send_message(request)]
    finally:
        await client.close()
    kinds = [event.WhichOneof("payload") for event in events]
    assert kinds[0] == "task"
    if streaming:
        assert kinds == ["task", "status_update", "artifact_update", "status_update"]
        final_state = events[-1].status_update.status.state
        artifact_text = events[2].artifact_update.artifact.parts[0].text
        task_id = events[0].task.id
    else:
        assert kinds == ["task"]
        task = events[0].task
        final_state = task.status.state
        artifact_text = task.artifacts[0].parts[0].text
        task_id = task.id
    assert final_state == TaskState.TASK_STATE_COMPLETED
    assert "hi" in artifact_text
    # Every event the client saw is in the task's stored log, in order.
    assert await _log_kinds(task_id) == ["task", "status", "artifact", "status"]


async def _log_kinds(task_id: str) -> list[str]:
    from asgiref.sync import sync_to_async

    return await sync_to_async(
        lambda: list(TaskEvent.objects.filter(task_id=task_id).order_by("seq").values_list("kind", flat=True))
    )()


def test_the_seed_request_completes_with_the_echoed_artifact(rpc):
    body = user_message("hi", new_id())
    answer = rpc("SendMessage", body)
    task = answer["result"]["task"]
    assert answer["id"] == "req-1"
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["status"]["message"]["parts"] == [{"text": "Request is completed!"}]
    assert task["artifacts"][0]["parts"][0]["text"] == "Hello, World! I have received your request (hi)"
    assert task["history"][0]["parts"] == [{"text": "hi"}]


def test_terminal_task_refuses_messages_and_follow_up_makes_a_new_task(rpc, stored):
    first = rpc("SendMessage", user_message("first", new_id()))["result"]["task"]
    task_id, context_id = first["id"], first["contextId"]

    again = rpc("SendMessage", user_message("more", new_id(), taskId=task_id))
    assert again["error"]["code"] == -32004
    assert "terminal state" in again["error"]["message"]

    fetched = rpc("GetTask", {"id": task_id})["result"]
    assert fetched["status"]["state"] == "TASK_STATE_COMPLETED"

    cancel = rpc("CancelTask", {"id": task_id})
    assert cancel["error"]["code"] == -32002

    follow_up = rpc(
        "SendMessage",
        user_message("refine", new_id(), contextId=context_id, referenceTaskIds=[task_id]),
    )["result"]["task"]
    assert follow_up["id"] != task_id
    assert follow_up["contextId"] == context_id
    assert follow_up["status"]["state"] == "TASK_STATE_COMPLETED"
    assert follow_up["history"][0]["referenceTaskIds"] == [task_id]
    # The refused message left the first task untouched.
    assert Task.objects.get(pk=task_id).messages.filter(role="user").count() == 1


def test_return_immediately_answers_before_the_agent_finishes(rpc):
    params = {**user_message("quick", new_id()), "configuration": {"returnImmediately": True}}
    task = rpc("SendMessage", params)["result"]["task"]
    assert task["status"]["state"] in {
        "TASK_STATE_SUBMITTED",
        "TASK_STATE_WORKING",
        "TASK_STATE_COMPLETED",
    }
    assert rpc("GetTask", {"id": task["id"]})["result"]["id"] == task["id"]


def test_history_length_limits_the_returned_history(rpc):
    task = rpc("SendMessage", user_message("count", new_id()))["result"]["task"]
    full = rpc("GetTask", {"id": task["id"]})["result"]
    assert len(full["history"]) == 2
    assert "history" not in rpc("GetTask", {"id": task["id"], "historyLength": 0})["result"]
    last = rpc("GetTask", {"id": task["id"], "historyLength": 1})["result"]["history"]
    assert last == full["history"][-1:]
    negative = rpc("GetTask", {"id": task["id"], "historyLength": -1})
    assert negative["error"]["code"] == -32602


def test_same_message_id_again_is_a_new_message_and_a_new_task(rpc):
    message_id = new_id()
    first = rpc("SendMessage", user_message("once", message_id))["result"]["task"]
    again = rpc("SendMessage", user_message("once", message_id))["result"]["task"]
    assert again["id"] != first["id"]
    assert Task.objects.filter(messages__message_id=message_id).count() == 2


def test_unknown_task_is_not_found(rpc):
    assert rpc("GetTask", {"id": str(uuid.uuid4())})["error"]["code"] == -32001
    assert rpc("GetTask", {"id": "not-a-uuid"})["error"]["code"] == -32001
    assert (
        rpc("SendMessage", user_message("x", new_id(), taskId=str(uuid.uuid4())))["error"]["code"] == -32001
    )


def test_agent_card_names_the_host_and_port_it_was_fetched_from(server):
    response = httpx.get(server.agent_url("echo") + ".well-known/agent-card.json")
    card = response.json()
    assert card["supportedInterfaces"] == [
        {
            "url": server.agent_url("echo"),
            "protocolBinding": "JSONRPC",
            "protocolVersion": "1.0",
            "tenant": "demo",
        },
        {
            "url": server.agent_url("echo") + "rest",
            "protocolBinding": "HTTP+JSON",
            "protocolVersion": "1.0",
            "tenant": "demo",
        },
        {"url": server.agent_url("echo"), "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        # One gRPC server for every agent: the tenant field names the agent.
        {
            "url": server.grpc_target,
            "protocolBinding": "GRPC",
            "protocolVersion": "1.0",
            "tenant": "demo/echo",
        },
    ]
    # What 0.3 clients read.
    assert card["url"] == server.agent_url("echo") and card["protocolVersion"] == "0.3"
    extensions = card["capabilities"].pop("extensions")
    assert card["capabilities"] == {"streaming": True, "pushNotifications": True, "extendedAgentCard": False}
    assert [extension["params"]["header"] for extension in extensions] == ["Idempotency-Key"]
    assert "securitySchemes" not in card
    assert "max-age=" in response.headers["Cache-Control"]
    revalidated = httpx.get(
        server.agent_url("echo") + ".well-known/agent-card.json",
        headers={"If-None-Match": response.headers["ETag"]},
    )
    assert revalidated.status_code == 304
