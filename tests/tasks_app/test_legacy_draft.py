"""The 0.1 draft dialect (tasks/send, tasks/sendSubscribe, ...) as draft-era clients send it.

The request bodies are the seed article's examples, unchanged except for the URL.
"""

import copy
import secrets
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tasks_app.models import Task
from tests.tasks_app.legacy_helpers import other_tenant_echo, post, stored_counts, stream, unique

# The seed's tasks/send example, verbatim.
SEED_SEND = {
    "jsonrpc": "2.0",
    "id": "req-001",
    "method": "tasks/send",
    "params": {
        "id": "task-2024-0715-001",
        "sessionId": "session-abc123",
        "message": {
            "role": "user",
            "parts": [
                {
                    "type": "TextPart",
                    "text": "请将以下英文技术报告翻译为中文，保留 Markdown 格式，术语首次出现时附英文原文。",
                },
                {
                    "type": "DataPart",
                    "data": {
                        "sourceLanguage": "en",
                        "targetLanguage": "zh",
                        "preserveFormatting": True,
                        "termHandling": "first-occurrence-bilingual",
                    },
                },
                {
                    "type": "FilePart",
                    "file": {
                        "name": "report.md",
                        "mimeType": "text/markdown",
                        "uri": "https://storage.example.com/inputs/report.md",
                    },
                },
            ],
        },
    },
}

# The seed's input-required answer, verbatim.
SEED_ANSWER = {
    "jsonrpc": "2.0",
    "id": "req-004",
    "method": "tasks/send",
    "params": {
        "id": "task-2024-0715-001",
        "sessionId": "session-abc123",
        "message": {
            "role": "user",
            "parts": [{"type": "TextPart", "text": "指'部署运行'，翻译为'Agent 部署在集群上'"}],
        },
    },
}


def send_raw(server, body: dict, agent: str) -> dict:
    response = httpx.post(server.agent_url(agent), json=body, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


def text_send(task_id: str, text: str, **params) -> dict:
    return {"id": task_id, "message": {"role": "user", "parts": [{"type": "text", "text": text}]}, **params}


def test_the_seed_send_completes_under_the_clients_task_id(server, stored):
    answer = send_raw(server, SEED_SEND, "echo")
    assert answer["id"] == "req-001"
    task = answer["result"]
    assert task["id"] == "task-2024-0715-001"
    assert task["sessionId"] == "session-abc123"
    assert task["status"]["state"] == "completed"
    assert task["status"]["message"] == {
        "role": "agent",
        "parts": [{"type": "TextPart", "text": "Request is completed!"}],
    }
    (artifact,) = task["artifacts"]
    assert artifact["index"] == 0
    assert artifact["parts"][0]["type"] == "TextPart"
    assert "请将以下英文技术报告翻译为中文" in artifact["parts"][0]["text"]
    # The user's message comes back with all three parts in the spelling it was sent in.
    sent = task["history"][0]
    assert sent["role"] == "user"
    assert sent["parts"][1] == SEED_SEND["params"]["message"]["parts"][1]
    assert sent["parts"][2] == SEED_SEND["params"]["message"]["parts"][2]
    # Stored as A2A 1.0 parts under our own UUID, with the client's id beside it.
    row = Task.objects.get(agent__slug="echo", draft_alias__client_task_id="task-2024-0715-001")
    assert row.context.context_id == "session-abc123"
    parts = row.messages.get(role="user").parts
    assert parts[1]["data"]["targetLanguage"] == "zh"
    assert parts[2] == {
        "url": "https://storage.example.com/inputs/report.md",
        "mediaType": "text/markdown",
        "filename": "report.md",
    }

    fetched = post(server, "tasks/get", {"id": "task-2024-0715-001"})["result"]
    assert fetched["id"] == "task-2024-0715-001"
    assert fetched["sessionId"] == "session-abc123"
    assert fetched["status"]["state"] == "completed"
    assert fetched["artifacts"][0]["parts"][0]["type"] == "text"  # the spec's spelling by default
    assert "kind" not in fetched

    cancel = post(server, "tasks/cancel", {"id": "task-2024-0715-001"})
    assert cancel["error"]["code"] == -32002
    assert "data" not in cancel["error"] or isinstance(cancel["error"]["data"], dict)

    # The seed's send once more (a client that never heard the answer): the task it stored, not a refusal.
    again = post(server, "tasks/send", SEED_SEND["params"], request_id="req-again")["result"]
    assert again["id"] == "task-2024-0715-001" and again["status"]["state"] == "completed"
    assert again["artifacts"] == task["artifacts"]
    rows = Task.objects.filter(agent__slug="echo", draft_alias__client_task_id="task-2024-0715-001")
    assert rows.count() == 1
    assert rows.get().messages.filter(role="user").count() == 1


def test_a_resend_while_the_first_turn_runs_is_answered_when_that_turn_ends(
    server, stored, demo_agent, tmp_path
):
    # The draft has no Idempotency-Key: a client that lost its connection sends the same body again.
    agent = demo_agent("draft-gate", "ask-then-gate")
    task_id = unique("draft-resend")
    gate = tmp_path / "gate"
    body = {"jsonrpc": "2.0", "id": "r-1", "method": "tasks/send", "params": text_send(task_id, str(gate))}
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(send_raw, server, body, agent)
        deadline = time.monotonic() + 20
        while not Task.objects.filter(draft_alias__client_task_id=task_id, state="working").exists():
            assert time.monotonic() < deadline, "the first turn never started"
            time.sleep(0.05)
        second = pool.submit(send_raw, server, {**body, "id": "r-2"}, agent)
        try:
            time.sleep(0.5)
            # Not refused as a follow-up to a task that is not waiting for input: it waits for the turn.
            assert not second.done(), second.result()
        finally:
            gate.touch()
        answers = first.result(timeout=30)["result"], second.result(timeout=30)["result"]
    for answer in answers:
        assert answer["id"] == task_id and answer["status"]["state"] == "completed", answer
    assert answers[0]["status"] == answers[1]["status"]
    row = Task.objects.get(draft_alias__client_task_id=task_id)
    assert row.messages.filter(role="user").count() == 1


def test_a_resend_gets_its_task_and_the_same_answer_to_a_new_question_is_a_new_message(
    server, stored, demo_agent, tmp_path
):
    agent = demo_agent("draft-gate", "ask-then-gate")
    task_id = unique("draft-again")
    create = text_send(task_id, "open a gate")
    first = post(server, "tasks/send", create, agent=agent)["result"]
    assert first["status"]["state"] == "input-required"
    row = Task.objects.get(draft_alias__client_task_id=task_id)
    # The creating send again: the task as it stands, not an answer to the agent's question.
    again = post(server, "tasks/send", create, agent=agent, request_id="req-2")["result"]
    assert again["id"] == task_id and again["status"]["state"] == "input-required"
    assert row.messages.filter(role="user").count() == 1

    # "yes" answers the question and the agent asks again: "yes" once more is the next answer.
    for count in (2, 3):
        answer = post(server, "tasks/send", text_send(task_id, "yes"), agent=agent)["result"]
        assert answer["status"]["state"] == "input-required"
        assert row.messages.filter(role="user").count() == count

    gate = tmp_path / "gate"
    gate.touch()
    last = text_send(task_id, str(gate))
    finished = post(server, "tasks/send", last, agent=agent)["result"]
    assert finished["status"]["state"] == "completed"
    # The answer that finished the task, sent again: that task, not "terminal state".
    resent = post(server, "tasks/send", last, agent=agent, request_id="req-3")["result"]
    assert resent["id"] == task_id and resent["status"] == finished["status"]
    events = stream(server, "tasks/sendSubscribe", last, agent=agent)
    assert events[-1]["data"]["result"]["status"]["state"] == "completed"
    assert events[-1]["data"]["result"]["final"] is True
    assert row.messages.filter(role="user").count() == 4


def test_the_seed_send_subscribe_streams_status_and_artifact_events(server, stored):
    # Same body as the seed's tasks/sendSubscribe (its "..." message filled with the tasks/send one),
    # sent to the long-running agent, which, like the seed's translator, reports progress.
    params = copy.deepcopy(SEED_SEND["params"])
    events = stream(server, "tasks/sendSubscribe", params, agent="progress", request_id="req-002")
    names = [event.get("event") for event in events]
    assert set(names) == {"status", "artifact"}
    assert names.count("status") >= 3 and names.count("artifact") >= 2
    for event in events:
        assert event["data"]["jsonrpc"] == "2.0" and event["data"]["id"] == "req-002"
        assert event["data"]["result"]["id"] == "task-2024-0715-001"
    results = [event["data"]["result"] for event in events]
    statuses = [r for r in results if "status" in r]
    assert statuses[-1] == results[-1]
    assert results[-1]["status"]["state"] == "completed" and results[-1]["final"] is True
    assert all(s["final"] is False for s in statuses[:-1])
    assert any(s["status"]["state"] == "working" for s in statuses)
    for artifact in (r["artifact"] for r in results if "artifact" in r):
        assert artifact["parts"][0]["type"] == "TextPart"
    # The SSE ids are the task's log positions, ascending, so Last-Event-ID works.
    ids = [int(event["id"]) for event in events if "id" in event]
    assert ids == sorted(ids) and len(ids) == len(set(ids))


def test_the_seed_input_required_round_trip(server, stored):
    first = send_raw(server, SEED_SEND, "clarify")["result"]
    assert first["id"] == "task-2024-0715-001"
    assert first["status"]["state"] == "input-required"
    assert first["status"]["message"]["role"] == "agent"
    assert first["status"]["message"]["parts"][0]["type"] == "TextPart"

    second = send_raw(server, SEED_ANSWER, "clarify")["result"]
    assert second["id"] == "task-2024-0715-001"
    assert second["sessionId"] == "session-abc123"
    assert second["status"]["state"] == "completed"
    text = second["artifacts"][0]["parts"][0]["text"]
    assert "Agent 部署在集群上" in text and "请将以下英文技术报告翻译为中文" in text
    # One task, two user messages: the follow-up continued it.
    row = Task.objects.get(agent__slug="clarify", draft_alias__client_task_id="task-2024-0715-001")
    assert row.messages.filter(role="user").count() == 2


def test_spec_spelling_and_bytes_files_round_trip(server, stored):
    task_id = unique("draft")
    params = {
        "id": task_id,
        "message": {
            "role": "user",
            "parts": [
                {"type": "text", "text": "hello"},
                {"type": "file", "file": {"name": "a.txt", "mimeType": "text/plain", "bytes": "aGVsbG8="}},
            ],
        },
    }
    task = post(server, "tasks/send", params)["result"]
    assert task["id"] == task_id
    assert task["sessionId"]  # a new context when the client names none
    assert task["artifacts"][0]["parts"][0]["type"] == "text"
    assert task["history"][0]["parts"][1] == params["message"]["parts"][1]
    assert "history" in post(server, "tasks/get", {"id": task_id, "historyLength": 0})["result"]
    limited = post(server, "tasks/get", {"id": task_id, "historyLength": 1})["result"]
    assert len(limited["history"]) == 1


def test_a_uuid_shaped_client_id_is_still_the_clients(server, stored):
    import uuid

    task_id = str(uuid.uuid4())
    task = post(server, "tasks/send", text_send(task_id, "uuid"))["result"]
    assert task["id"] == task_id
    assert post(server, "tasks/get", {"id": task_id})["result"]["id"] == task_id
    assert str(Task.objects.get(draft_alias__client_task_id=task_id).pk) != task_id


def test_resubscribe_to_a_running_draft_task(server, stored):
    task_id = unique("draft-resub")
    with httpx.stream(
        "POST",
        server.agent_url("progress"),
        json={"jsonrpc": "2.0", "id": 1, "method": "tasks/sendSubscribe", "params": text_send(task_id, "go")},
        timeout=30,
    ) as response:
        next(response.iter_lines())  # the task is running; drop this connection
    events = stream(server, "tasks/resubscribe", {"id": task_id}, agent="progress")
    results = [event["data"]["result"] for event in events]
    assert all(r["id"] == task_id for r in results)
    assert results[-1]["status"]["state"] == "completed" and results[-1]["final"] is True
    # Artifacts made before the resubscribe are replayed, then the rest arrive live.
    assert any("artifact" in r for r in results)


def test_cancel_a_running_draft_task(server, stored):
    task_id = unique("draft-cancel")
    with httpx.stream(
        "POST",
        server.agent_url("progress"),
        json={"jsonrpc": "2.0", "id": 1, "method": "tasks/sendSubscribe", "params": text_send(task_id, "go")},
        timeout=30,
    ) as response:
        next(response.iter_lines())
    canceled = post(server, "tasks/cancel", {"id": task_id}, agent="progress")["result"]
    assert canceled["id"] == task_id
    assert canceled["status"]["state"] == "canceled"


def test_push_notification_given_with_the_send_is_stored(server, stored):
    task_id = unique("draft-push")
    params = text_send(task_id, "push", pushNotification={"url": "http://127.0.0.1:9/hook", "token": "tok-1"})
    assert post(server, "tasks/send", params)["result"]["id"] == task_id
    got = post(server, "tasks/pushNotification/get", {"id": task_id})["result"]
    assert got["id"] == task_id
    assert got["pushNotificationConfig"]["url"] == "http://127.0.0.1:9/hook"

    other = unique("draft-push-set")
    post(server, "tasks/send", text_send(other, "later"))
    config = {
        "url": "http://127.0.0.1:9/other",
        "authentication": {"schemes": ["Bearer"], "credentials": "c"},
    }
    answer = post(server, "tasks/pushNotification/set", {"id": other, "pushNotificationConfig": config})
    assert answer["result"]["id"] == other
    assert answer["result"]["pushNotificationConfig"]["url"] == config["url"]
    assert (
        post(server, "tasks/pushNotification/get", {"id": other})["result"]["pushNotificationConfig"]["url"]
        == (config["url"])
    )


def test_unknown_and_foreign_tasks_are_not_found(server, stored):
    assert post(server, "tasks/get", {"id": "no-such-draft-task"})["error"]["code"] == -32001
    task_id = unique("draft-mine")
    post(server, "tasks/send", text_send(task_id, "mine"))
    # Client ids are per agent: another agent's endpoint does not see it.
    assert post(server, "tasks/get", {"id": task_id}, agent="clarify")["error"]["code"] == -32001
    assert post(server, "tasks/cancel", {"id": task_id}, agent="clarify")["error"]["code"] == -32001


def _token_of_the_demo_client() -> str:
    """A token of the demo tenant's own client: a caller other than the anonymous one."""
    from datetime import timedelta

    from django.utils import timezone
    from oauth2_provider.models import AccessToken, set_token_value

    from tenants.models import Application

    raw = secrets.token_urlsafe(24)
    token = AccessToken(
        application=Application.objects.filter(tenant__slug="demo").order_by("pk").first(),
        scope="a2a:invoke a2a:read",
        expires=timezone.now() + timedelta(hours=1),
    )
    set_token_value(token, raw)
    token.save()
    return raw


def test_each_caller_names_its_tasks_in_a_space_of_its_own(server, stored):
    """An id another caller of the agent took is no error: that would tell its task exists."""
    task_id = unique("draft-caller")
    post(server, "tasks/send", text_send(task_id, "anonymous's"))
    body = {"jsonrpc": "2.0", "id": "req-1", "method": "tasks/send", "params": text_send(task_id, "client's")}
    headers = {"Authorization": f"Bearer {_token_of_the_demo_client()}"}
    theirs = httpx.post(server.agent_url("echo"), json=body, headers=headers, timeout=30).json()
    assert theirs["result"]["id"] == task_id, theirs
    assert "client's" in theirs["result"]["artifacts"][0]["parts"][0]["text"]
    ours = post(server, "tasks/get", {"id": task_id})["result"]
    assert "anonymous's" in ours["artifacts"][0]["parts"][0]["text"]
    assert Task.objects.filter(draft_alias__client_task_id=task_id).count() == 2


def test_another_tenants_agent_cannot_see_or_take_over_the_task(server, stored):
    task_id = unique("draft-tenant")
    post(server, "tasks/send", text_send(task_id, "demo's"))
    tenant = other_tenant_echo()
    assert post(server, "tasks/get", {"id": task_id}, tenant=tenant)["error"]["code"] == -32001
    # The same id there names a task of that tenant's own, not ours.
    theirs = post(server, "tasks/send", text_send(task_id, "globex's"), tenant=tenant)["result"]
    assert theirs["id"] == task_id
    assert "globex's" in theirs["artifacts"][0]["parts"][0]["text"]
    ours = post(server, "tasks/get", {"id": task_id})["result"]
    assert "demo's" in ours["artifacts"][0]["parts"][0]["text"]
    assert Task.objects.filter(draft_alias__client_task_id=task_id).count() == 2


GOOD = text_send("bad-input-task", "x")


@pytest.mark.parametrize(
    ("method", "params"),
    [
        pytest.param("tasks/send", {"message": GOOD["message"]}, id="no-id"),
        pytest.param("tasks/send", {**GOOD, "id": ""}, id="empty-id"),
        pytest.param("tasks/send", {**GOOD, "id": "x" * 300}, id="long-id"),
        pytest.param("tasks/send", {**GOOD, "id": 12}, id="number-id"),
        pytest.param("tasks/send", {"id": "bad-input-task"}, id="no-message"),
        pytest.param(
            "tasks/send",
            {**GOOD, "message": {"role": "agent", "parts": GOOD["message"]["parts"]}},
            id="agent",
        ),
        pytest.param("tasks/send", {**GOOD, "message": {"role": "user", "parts": []}}, id="no-parts"),
        pytest.param(
            "tasks/send",
            {**GOOD, "message": {"role": "user", "parts": [{"type": "ImagePart"}]}},
            id="unknown-part",
        ),
        pytest.param(
            "tasks/send",
            {
                **GOOD,
                "message": {"role": "user", "parts": [{"type": "file", "file": {"bytes": "%%%not base64"}}]},
            },
            id="bad-base64",
        ),
        pytest.param(
            "tasks/send",
            {**GOOD, "message": {"role": "user", "parts": [{"type": "data", "data": 3}]}},
            id="data-not-object",
        ),
        pytest.param(
            "tasks/send",
            {**GOOD, "message": {"role": "user", "parts": [{"type": ["text"], "text": "x"}]}},
            id="list-type",
        ),
        pytest.param("tasks/send", {**GOOD, "historyLength": -1}, id="negative-history"),
        pytest.param("tasks/send", {**GOOD, "sessionId": ["x"]}, id="list-session"),
        pytest.param(
            "tasks/sendSubscribe", {**GOOD, "pushNotification": {"token": "t"}}, id="push-without-url"
        ),
        # Deeper than any request may nest, in a param the draft does not read.
        pytest.param("tasks/send", {**GOOD, "x": _nested(200)}, id="deep-unknown-param"),
        pytest.param("tasks/get", {"id": 5}, id="get-number-id"),
        pytest.param("tasks/get", {}, id="get-no-id"),
        pytest.param("tasks/pushNotification/set", {"id": "bad-input-task"}, id="push-set-no-config"),
    ],
)
def test_bad_input_gets_invalid_params_and_stores_nothing(server, stored, method, params):
    before = stored_counts()
    answer = post(server, method, params)
    assert answer["error"]["code"] == -32602, answer
    assert answer["error"]["message"]
    assert stored_counts() == before
