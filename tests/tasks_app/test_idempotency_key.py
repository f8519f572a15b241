"""Safe retries of SendMessage through the Idempotency-Key header (IETF httpapi draft).

Same key, caller, agent and request within the key's lifetime: the original
task in its current state, and no second turn. Same key, other request: 422 on
REST, -32602 on JSON-RPC. Different callers' keys never meet.
"""

import threading
import uuid
from datetime import timedelta

import httpx
import pytest
from a2a.types import TaskState
from django.utils import timezone

from tasks_app.models import IdempotencyKey, Message
from tests.api import tenancy
from tests.conftest import user_message
from tests.tasks_app.test_message_ids import (
    BINDINGS,
    _second_client_token,
    fixed_id_request,
    sdk_client,
    send,
)

trio = tenancy.trio


def new_key() -> str:
    return f"key-{uuid.uuid4()}"


def user_turns(task_id: str) -> int:
    return Message.objects.filter(task_id=task_id, role=Message.Role.USER).count()


@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize("streaming", [False, True], ids=["blocking", "streaming"])
async def test_sdk_client_retrying_with_the_same_key_gets_the_original_task(
    server, stored, binding, streaming
):
    from asgiref.sync import sync_to_async

    key = f'"{new_key()}"'  # the draft's sf-string form
    request = fixed_id_request("retry me", f"m-{uuid.uuid4()}")
    tasks = []
    for _ in range(2):
        client = await sdk_client(
            server.agent_url("echo"), binding, streaming=streaming, headers={"Idempotency-Key": key}
        )
        try:
            events = await send(client, request)
        finally:
            await client.close()
        first = events[0]
        tasks.append(first.task)
    assert tasks[0].id == tasks[1].id
    # The retry shows the task as it is now: completed, with its artifact.
    assert tasks[1].status.state == TaskState.TASK_STATE_COMPLETED
    assert "retry me" in tasks[1].artifacts[0].parts[0].text
    assert await sync_to_async(user_turns)(tasks[0].id) == 1


def test_the_same_key_with_another_body_is_refused_on_both_bindings(server, rpc):
    key = new_key()
    first = rpc("SendMessage", user_message("one", f"m-{uuid.uuid4()}"), headers={"Idempotency-Key": key})
    task_id = first["result"]["task"]["id"]
    other = rpc("SendMessage", user_message("two", f"m-{uuid.uuid4()}"), headers={"Idempotency-Key": key})
    assert other["error"]["code"] == -32602
    assert "already used with a different request" in other["error"]["message"]

    rest = httpx.post(
        server.agent_url("echo") + "rest/message:send",
        json=user_message("three", f"m-{uuid.uuid4()}"),
        headers={"A2A-Version": "1.0", "Idempotency-Key": key},
        timeout=30,
    )
    assert rest.status_code == 422
    assert rest.json()["error"]["code"] == 422
    assert rest.json()["error"]["details"][0]["reason"] == "INVALID_PARAMS"
    # Nothing of the refused requests was stored.
    assert user_turns(task_id) == 1
    assert [list(IdempotencyKey.objects.filter(key=key).values_list("task_id", flat=True))] == [
        [uuid.UUID(task_id)]
    ]


def test_keys_of_different_callers_never_meet(trio):
    key = new_key()
    mine, theirs = trio.token("acme"), _second_client_token(trio)
    body = user_message("same body", "msg-1")
    headers = {"Idempotency-Key": key}
    theirs_task = _rpc_with(trio, theirs, body, headers)["result"]["task"]
    my_task = _rpc_with(trio, mine, body, headers)["result"]["task"]
    assert my_task["id"] != theirs_task["id"]
    # My retry finds my task: the key is mine alone.
    again = _rpc_with(trio, mine, body, headers)["result"]["task"]
    assert again["id"] == my_task["id"]


def _rpc_with(trio, token: str, params: dict, headers: dict) -> dict:
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
    sent = {"A2A-Version": "1.0", **trio.auth(token), **headers}
    return httpx.post(f"{trio.base_url}/a2a/acme/vault/", json=body, headers=sent, timeout=30).json()


def test_concurrent_retries_start_one_task_and_one_turn(server):
    key = new_key()
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": user_message("race", "msg-race")}
    headers = {"A2A-Version": "1.0", "Idempotency-Key": key}
    answers = []

    def post():
        response = httpx.post(server.agent_url("echo"), json=body, headers=headers, timeout=60)
        answers.append(response.json())

    threads = [threading.Thread(target=post) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all("result" in answer for answer in answers), answers
    ids = {answer["result"]["task"]["id"] for answer in answers}
    assert len(ids) == 1
    (task_id,) = ids
    assert user_turns(task_id) == 1
    assert IdempotencyKey.objects.filter(key=key).count() == 1


def test_a_key_older_than_its_lifetime_starts_a_new_task(rpc):
    key = new_key()
    params = user_message("old", f"m-{uuid.uuid4()}")
    first = rpc("SendMessage", params, headers={"Idempotency-Key": key})["result"]["task"]
    IdempotencyKey.objects.filter(key=key).update(created_at=timezone.now() - timedelta(hours=25))
    later = rpc("SendMessage", params, headers={"Idempotency-Key": key})["result"]["task"]
    assert later["id"] != first["id"]
    assert list(IdempotencyKey.objects.filter(key=key).values_list("task_id", flat=True)) == [
        uuid.UUID(later["id"])
    ]


def test_a_retried_answer_to_a_question_starts_no_second_turn(rpc):
    asked = rpc("SendMessage", user_message("Plan it", f"m-{uuid.uuid4()}"), agent="clarify")["result"][
        "task"
    ]
    answer = user_message("For me", f"m-{uuid.uuid4()}", taskId=asked["id"])
    headers = {"Idempotency-Key": new_key()}
    done = rpc("SendMessage", answer, agent="clarify", headers=headers)["result"]["task"]
    retried = rpc("SendMessage", answer, agent="clarify", headers=headers)["result"]["task"]
    assert done["status"]["state"] == retried["status"]["state"] == "TASK_STATE_COMPLETED"
    assert retried["id"] == asked["id"]
    assert user_turns(asked["id"]) == 2
    # Without the key the same answer is a new message, refused by the completed task.
    assert rpc("SendMessage", answer, agent="clarify")["error"]["code"] == -32004


@pytest.mark.parametrize("value", ['"', "a b", "x" * 256, '"unterminated'])
def test_a_malformed_key_is_invalid_params(rpc, value):
    answer = rpc("SendMessage", user_message("hi", f"m-{uuid.uuid4()}"), headers={"Idempotency-Key": value})
    assert answer["error"]["code"] == -32602
    assert "Idempotency-Key" in answer["error"]["message"]


def test_the_agent_card_declares_the_idempotency_extension(server):
    card = httpx.get(server.agent_url("echo") + ".well-known/agent-card.json").json()
    (extension,) = card["capabilities"]["extensions"]
    assert extension["params"]["header"] == "Idempotency-Key"
    assert extension.get("required", False) is False  # ProtoJSON leaves a false out
    assert "Idempotency-Key" in extension["description"]
