"""The A2A 0.3 JSON-RPC dialect, sent the way 0.3 clients send it: no A2A-Version header."""

import base64

import httpx
import pytest

from tasks_app.models import Message, Task
from tests.tasks_app.legacy_helpers import other_tenant_echo, post, stored_counts, stream, unique


def message(text: str, **fields) -> dict:
    return {
        "message": {
            "kind": "message",
            "role": "user",
            "messageId": unique("msg03"),
            "parts": [{"kind": "text", "text": text}],
            **fields,
        }
    }


def test_message_send_answers_a_0_3_task(server, stored):
    answer = post(server, "message/send", message("hi"))
    assert answer["id"] == "req-1"
    task = answer["result"]
    assert task["kind"] == "task"
    assert task["status"]["state"] == "completed"
    assert task["status"]["message"]["kind"] == "message"
    assert task["status"]["message"]["role"] == "agent"
    assert task["status"]["message"]["parts"] == [{"kind": "text", "text": "Request is completed!"}]
    artifact = task["artifacts"][0]
    assert artifact["artifactId"]
    assert artifact["parts"][0]["kind"] == "text"
    assert "Hello, World! I have received your request (hi)" in artifact["parts"][0]["text"]
    assert [m["role"] for m in task["history"]] == ["user", "agent"]
    assert task["history"][0]["parts"] == [{"kind": "text", "text": "hi"}]

    fetched = post(server, "tasks/get", {"id": task["id"]})["result"]
    assert fetched["kind"] == "task" and fetched["id"] == task["id"]
    # 0.3 (as the SDK reads it): historyLength 0 means the whole history.
    assert len(post(server, "tasks/get", {"id": task["id"], "historyLength": 0})["result"]["history"]) == 2
    assert len(post(server, "tasks/get", {"id": task["id"], "historyLength": 1})["result"]["history"]) == 1

    cancel = post(server, "tasks/cancel", {"id": task["id"]})
    assert cancel["error"]["code"] == -32002
    assert not isinstance(cancel["error"].get("data"), list)  # 0.3 data is an object, if any


def test_all_three_part_kinds_go_in_and_come_back(server, stored):
    parts = [
        {"kind": "text", "text": "look"},
        {"kind": "file", "file": {"bytes": "aGVsbG8=", "mimeType": "text/plain", "name": "a.txt"}},
        {"kind": "file", "file": {"uri": "https://files.invalid/b.pdf", "mimeType": "application/pdf"}},
        {"kind": "data", "data": {"k": [1, 2]}},
    ]
    params = {"message": {"role": "user", "messageId": unique("parts03"), "parts": parts}}
    task = post(server, "message/send", params)["result"]
    assert task["history"][0]["parts"] == parts


def test_file_bytes_in_the_url_safe_alphabet_are_stored_as_sent(server, stored):
    sent = b"\xfb\xff\xbf\x01\x02\x03"
    parts = [{"kind": "file", "file": {"bytes": base64.urlsafe_b64encode(sent).decode().rstrip("=")}}]
    assert "-" in parts[0]["file"]["bytes"] and "_" in parts[0]["file"]["bytes"]
    message_id = unique("urlsafe03")
    task = post(
        server, "message/send", {"message": {"role": "user", "messageId": message_id, "parts": parts}}
    )
    answered = task["result"]["history"][0]["parts"][0]["file"]["bytes"]
    assert base64.b64decode(answered) == sent
    stored_part = Message.objects.get(message_id=message_id).parts[0]
    assert base64.b64decode(stored_part["raw"]) == sent


def test_non_blocking_send_returns_at_once(server, stored):
    params = {**message("slow"), "configuration": {"blocking": False}}
    task = post(server, "message/send", params, agent="progress")["result"]
    assert task["kind"] == "task"
    assert task["status"]["state"] in {"submitted", "working"}
    assert (
        post(server, "tasks/cancel", {"id": task["id"]}, agent="progress")["result"]["status"]["state"]
        == "canceled"
    )


def test_message_stream_sends_kinds_and_a_final_event(server, stored):
    events = stream(server, "message/stream", message("streamed"), request_id=42)
    results = [event["data"]["result"] for event in events]
    assert all(event["data"]["id"] == 42 for event in events)
    assert "event" not in events[0]
    assert [r["kind"] for r in results] == ["task", "status-update", "artifact-update", "status-update"]
    assert results[1]["status"]["state"] == "working" and results[1]["final"] is False
    assert results[2]["artifact"]["parts"][0]["kind"] == "text"
    assert results[-1]["status"]["state"] == "completed" and results[-1]["final"] is True
    assert len({r["taskId"] for r in results[1:]}) == 1
    ids = [int(event["id"]) for event in events]
    assert ids == sorted(ids)


def test_input_required_ends_the_stream_with_final_and_the_answer_continues(server, stored):
    first = stream(server, "message/stream", message("plan a trip"), agent="clarify")
    last = first[-1]["data"]["result"]
    assert last["kind"] == "status-update" and last["status"]["state"] == "input-required"
    assert last["final"] is True
    answer = post(server, "message/send", message("for two", taskId=last["taskId"]), agent="clarify")[
        "result"
    ]
    assert answer["id"] == last["taskId"]
    assert answer["status"]["state"] == "completed"


def test_resubscribe_to_a_running_task(server, stored):
    task = post(
        server, "message/send", {**message("long"), "configuration": {"blocking": False}}, agent="progress"
    )["result"]
    events = stream(server, "tasks/resubscribe", {"id": task["id"]}, agent="progress")
    results = [event["data"]["result"] for event in events]
    assert results[0]["kind"] == "task" and results[0]["id"] == task["id"]
    kinds = {r["kind"] for r in results[1:]}
    assert "status-update" in kinds
    assert results[-1]["kind"] == "status-update"
    assert results[-1]["status"]["state"] == "completed" and results[-1]["final"] is True
    assert all(r["final"] is False for r in results[1:-1] if r["kind"] == "status-update")
    # Resubscribing to a finished task is refused with a 0.3 code.
    done = post(server, "tasks/resubscribe", {"id": task["id"]}, agent="progress")
    assert done["error"]["code"] == -32004


def test_push_config_set_get_list_delete(server, stored):
    task = post(server, "message/send", message("push me"))["result"]
    config = {"url": "http://127.0.0.1:9/hook03", "token": "t-03", "id": "cfg-1"}
    created = post(
        server, "tasks/pushNotificationConfig/set", {"taskId": task["id"], "pushNotificationConfig": config}
    )["result"]
    assert created["taskId"] == task["id"]
    assert created["pushNotificationConfig"]["url"] == config["url"]
    config_id = created["pushNotificationConfig"]["id"]

    got = post(
        server, "tasks/pushNotificationConfig/get", {"id": task["id"], "pushNotificationConfigId": config_id}
    )["result"]
    assert got["pushNotificationConfig"]["url"] == config["url"]
    # Without a config id, 0.3's get answers the task's config.
    assert (
        post(server, "tasks/pushNotificationConfig/get", {"id": task["id"]})["result"]["taskId"] == task["id"]
    )

    listed = post(server, "tasks/pushNotificationConfig/list", {"id": task["id"]})["result"]
    assert isinstance(listed, list) and [c["pushNotificationConfig"]["id"] for c in listed] == [config_id]

    deleted = post(
        server,
        "tasks/pushNotificationConfig/delete",
        {"id": task["id"], "pushNotificationConfigId": config_id},
    )
    assert deleted == {"jsonrpc": "2.0", "id": "req-1", "result": None}
    assert post(server, "tasks/pushNotificationConfig/list", {"id": task["id"]})["result"] == []


def test_extended_card_of_a_public_agent_is_not_configured(server, stored):
    answer = post(server, "agent/getAuthenticatedExtendedCard", None)
    assert answer["error"]["code"] == -32007


def test_unknown_task_is_not_found(server, stored):
    assert (
        post(server, "tasks/get", {"id": "00000000-0000-0000-0000-000000000000"})["error"]["code"] == -32001
    )
    assert post(server, "tasks/cancel", {"id": "nope"})["error"]["code"] == -32001
    assert post(server, "tasks/pushNotificationConfig/list", {"id": "nope"})["error"]["code"] == -32001


def test_another_agents_task_is_not_found(server, stored):
    task = post(server, "message/send", message("mine"))["result"]
    assert post(server, "tasks/get", {"id": task["id"]}, agent="clarify")["error"]["code"] == -32001
    assert Task.objects.filter(pk=task["id"], agent__slug="echo").exists()


def test_another_tenants_agent_cannot_see_the_task(server, stored):
    task = post(server, "message/send", message("acme's"))["result"]
    tenant = other_tenant_echo()
    assert post(server, "tasks/get", {"id": task["id"]}, tenant=tenant)["error"]["code"] == -32001
    assert post(server, "tasks/cancel", {"id": task["id"]}, tenant=tenant)["error"]["code"] == -32001
    follow_up = post(server, "message/send", message("mine now", taskId=task["id"]), tenant=tenant)
    assert follow_up["error"]["code"] == -32001
    assert Task.objects.get(pk=task["id"]).messages.filter(role="user").count() == 1


@pytest.mark.parametrize("version", ["1.0", "1", "1.7", "1.0.0"])
def test_a_1_x_version_on_an_older_dialects_method_is_version_not_supported(server, stored, version):
    # A request naming 1.x is processed with 1.x semantics (spec §3.6), which have no
    # message/send; a2a-sdk refuses it as an unsupported version. It was served as 0.3.
    task = post(server, "message/send", message("mine"))["result"]
    before = stored_counts()
    calls = {
        "message/send": message("v"),
        "tasks/get": {"id": task["id"]},
        "tasks/cancel": {"id": task["id"]},
        "tasks/pushNotificationConfig/list": {"id": task["id"]},
        "tasks/send": {
            "id": unique("draft"),
            "message": {"role": "user", "parts": [{"type": "text", "text": "v"}]},
        },
    }
    for method, params in calls.items():
        body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
        response = httpx.post(
            server.agent_url("echo"), json=body, headers={"A2A-Version": version}, timeout=30
        )
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["id"] == 7 and "result" not in answer, answer
        assert answer["error"]["code"] == -32009, (method, answer)
        assert version in answer["error"]["message"] and method in answer["error"]["message"]
    assert stored_counts() == before


@pytest.mark.parametrize("headers", [{}, {"A2A-Version": "0.3"}, {"A2A-Version": "0.2"}])
def test_an_older_dialects_method_is_served_with_no_version_or_a_0_x_one(server, stored, headers):
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": message("v")}
    response = httpx.post(server.agent_url("echo"), json=body, headers=headers, timeout=30)
    assert response.json()["result"]["kind"] == "task"


GOOD = message("x")["message"]


@pytest.mark.parametrize(
    ("method", "params"),
    [
        pytest.param("message/send", {}, id="no-message"),
        pytest.param("message/send", {"message": {**GOOD, "parts": []}}, id="no-parts"),
        pytest.param("message/send", {"message": {**GOOD, "role": "agent"}}, id="agent-role"),
        pytest.param("message/send", {"message": {**GOOD, "role": "ROLE_USER"}}, id="1.0-role"),
        pytest.param("message/send", {"message": {**GOOD, "messageId": 5}}, id="number-message-id"),
        pytest.param(
            "message/send",
            {"message": {**GOOD, "parts": [{"kind": "file", "file": {"bytes": "%%%"}}]}},
            id="bad-base64",
        ),
        pytest.param(
            "message/send", {"message": {**GOOD, "parts": [{"kind": "data", "data": 1}]}}, id="data-number"
        ),
        pytest.param("message/stream", {"message": "hi"}, id="stream-message-string"),
        pytest.param(
            "message/send", {"message": GOOD, "configuration": {"historyLength": -2}}, id="negative-history"
        ),
        pytest.param("tasks/get", {"id": ["x"]}, id="get-list-id"),
        pytest.param("tasks/pushNotificationConfig/set", {"taskId": "x"}, id="push-set-no-config"),
        pytest.param("tasks/pushNotificationConfig/delete", {"id": "x"}, id="push-delete-no-config-id"),
    ],
)
def test_bad_input_gets_invalid_params_and_stores_nothing(server, stored, method, params):
    before = stored_counts()
    answer = post(server, method, params)
    assert answer["error"]["code"] == -32602, answer
    assert answer["error"]["message"]
    assert stored_counts() == before


async def test_the_sdks_own_0_3_client_transport_works_against_us(server, stored):
    from a2a.compat.v0_3.jsonrpc_transport import CompatJsonRpcTransport
    from a2a.helpers import new_text_message
    from a2a.types import a2a_pb2 as pb
    from a2a.utils.errors import TaskNotCancelableError

    transport = CompatJsonRpcTransport(httpx.AsyncClient(timeout=30), None, server.agent_url("echo"))
    try:
        sent = await transport.send_message(
            pb.SendMessageRequest(message=new_text_message("from 0.3", role=pb.ROLE_USER))
        )
        assert sent.task.status.state == pb.TASK_STATE_COMPLETED
        assert "from 0.3" in sent.task.artifacts[0].parts[0].text

        streamed = [
            event
            async for event in transport.send_message_streaming(
                pb.SendMessageRequest(message=new_text_message("streamed 0.3", role=pb.ROLE_USER))
            )
        ]
        kinds = [event.WhichOneof("payload") for event in streamed]
        assert kinds == ["task", "status_update", "artifact_update", "status_update"]
        assert streamed[-1].status_update.status.state == pb.TASK_STATE_COMPLETED

        fetched = await transport.get_task(pb.GetTaskRequest(id=sent.task.id))
        assert fetched.id == sent.task.id and fetched.status.state == pb.TASK_STATE_COMPLETED
        with pytest.raises(TaskNotCancelableError):
            await transport.cancel_task(pb.CancelTaskRequest(id=sent.task.id))
    finally:
        await transport.close()
