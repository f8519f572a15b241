"""Bad input gets its JSON-RPC / A2A code, never a 500, and nothing is stored."""

import time

import httpx
import pytest

from tasks_app.models import Context, Message, Task, TaskEvent
from tests.conftest import user_message

GOOD_BODY = {
    "jsonrpc": "2.0",
    "id": 7,
    "method": "SendMessage",
    "params": user_message("hi", "bad-input-msg"),
}


def stored_counts() -> tuple[int, ...]:
    """Rows stored, once the turns other tests left running have ended (they still write)."""
    deadline = time.monotonic() + 20
    open_turns = Message.objects.filter(turn__in=[Message.Turn.PENDING, Message.Turn.RUNNING])
    while open_turns.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return tuple(model.objects.count() for model in (Context, Task, Message, TaskEvent))


def post(server, content: bytes | str, headers: dict | None = None) -> httpx.Response:
    sent = {"Content-Type": "application/json", "A2A-Version": "1.0", **(headers or {})}
    return httpx.post(server.agent_url("echo"), content=content, headers=sent, timeout=30)


@pytest.mark.parametrize(
    ("content", "headers", "code"),
    [
        pytest.param(b'{"jsonrpc": "2.0", "id": 1, "method": ', {}, -32700, id="malformed-json"),
        pytest.param(b"\xff\xfe", {}, -32700, id="not-utf8"),
        pytest.param({**GOOD_BODY, "jsonrpc": "1.0"}, {}, -32600, id="wrong-jsonrpc-version"),
        pytest.param([GOOD_BODY], {}, -32600, id="batch"),
        pytest.param({**GOOD_BODY, "id": True}, {}, -32600, id="boolean-id"),
        pytest.param({**GOOD_BODY, "method": "NoSuchMethod"}, {}, -32601, id="unknown-method"),
        pytest.param({**GOOD_BODY, "params": {}}, {}, -32602, id="missing-message"),
        pytest.param(
            {
                **GOOD_BODY,
                "params": {"message": {"role": "ROLE_USER", "messageId": "m", "parts": []}},
            },
            {},
            -32602,
            id="no-parts",
        ),
        pytest.param(
            {
                **GOOD_BODY,
                "params": {"message": {"role": "ROLE_AGENT", "messageId": "m", "parts": [{"text": "x"}]}},
            },
            {},
            -32602,
            id="agent-role",
        ),
        pytest.param(
            {**GOOD_BODY, "params": {"message": {"role": 12, "messageId": [], "parts": "x"}}},
            {},
            -32602,
            id="wrong-types",
        ),
        pytest.param(GOOD_BODY, {"A2A-Version": "99.0"}, -32009, id="unsupported-version"),
        pytest.param(GOOD_BODY, {"Content-Type": "text/plain"}, -32005, id="non-json-content-type"),
        # A form type reaches the endpoint too: Daphne's Twisted does not parse the body first
        # (a2a_platform/daphne_requests.py; it used to answer its own HTML 400 to this one).
        pytest.param(
            GOOD_BODY, {"Content-Type": "multipart/form-data; boundary=x"}, -32005, id="form-content-type"
        ),
        pytest.param(
            {**GOOD_BODY, "params": {**GOOD_BODY["params"], "tenant": "globex"}},
            {},
            -32602,
            id="other-tenant",
        ),
    ],
)
def test_bad_request_gets_its_code_and_stores_nothing(server, stored, content, headers, code):
    import json

    before = stored_counts()
    raw = content if isinstance(content, bytes) else json.dumps(content)
    response = post(server, raw, headers)
    assert response.status_code == 200
    error = response.json()["error"]
    assert error["code"] == code
    assert error["message"]
    assert stored_counts() == before


def test_missing_version_header_is_read_as_0_3_and_refused_for_1_0_methods(server, stored):
    before = stored_counts()
    import json

    response = httpx.post(
        server.agent_url("echo"),
        content=json.dumps(GOOD_BODY),
        headers={"Content-Type": "application/json"},
    )
    error = response.json()["error"]
    assert error["code"] == -32009
    assert "0.3" in error["message"]
    assert stored_counts() == before


def test_version_in_the_query_string_is_accepted(server):
    import json

    response = httpx.post(
        server.agent_url("echo") + "?A2A-Version=1.0",
        content=json.dumps({**GOOD_BODY, "params": user_message("q", "query-version-msg")}),
        headers={"Content-Type": "application/json"},
        timeout=30,
    )
    assert response.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_unknown_agent_answers_404_with_a_json_rpc_error(server):
    response = httpx.post(
        f"{server.base_url}/a2a/demo/nobody/", json=GOOD_BODY, headers={"A2A-Version": "1.0"}
    )
    assert response.status_code == 404
    assert response.json()["error"]["code"] == -32601


# Requests to the operations that look their agent up in their own first trip to a database
# thread (operations.takes_pending_call), each with a fault the binding finds before that trip.
EARLY_FAULTS = [
    pytest.param("GetTask", {"id": "t", "historyLength": "many"}, {}, -32602, id="bad-params"),
    pytest.param("ListTasks", {"pageSize": 0}, {}, -32602, id="refused-params"),
    pytest.param("GetTask", {"id": "t"}, {"A2A-Version": "0.3"}, -32009, id="old-version"),
    pytest.param("SendMessage", {"message": {"parts": "hi"}}, {}, -32602, id="send-bad-params"),
    pytest.param("SendStreamingMessage", {"message": 7}, {}, -32602, id="stream-bad-params"),
]


@pytest.mark.parametrize(("method", "params", "headers", "code"), EARLY_FAULTS)
def test_no_agent_comes_before_what_is_wrong_with_the_request(server, method, params, headers, code):
    body = {"jsonrpc": "2.0", "id": 9, "method": method, "params": params}
    sent = {"A2A-Version": "1.0", **headers}
    nobody = httpx.post(f"{server.base_url}/a2a/demo/nobody/", json=body, headers=sent, timeout=30)
    assert nobody.status_code == 404
    error = nobody.json()["error"]
    assert (error["code"], error["message"]) == (-32601, "No agent at this URL")
    # The same request to an agent that exists gets the request's own error.
    echo = httpx.post(server.agent_url("echo"), json=body, headers=sent, timeout=30)
    assert echo.json()["error"]["code"] == code and echo.json()["id"] == 9


@pytest.mark.parametrize(
    ("query", "headers", "status"),
    [
        pytest.param("?historyLength=many", {}, 400, id="bad-params"),
        pytest.param("", {"A2A-Version": "0.3"}, 400, id="old-version"),
    ],
)
def test_rest_says_no_agent_before_what_is_wrong_with_the_request(server, query, headers, status):
    sent = {"A2A-Version": "1.0", **headers}
    path = "rest/tasks/00000000-0000-0000-0000-000000000000" + query
    nobody = httpx.get(f"{server.base_url}/a2a/demo/nobody/{path}", headers=sent, timeout=30)
    assert nobody.status_code == 404
    assert nobody.json()["error"]["message"] == "No agent at this URL"
    echo = httpx.get(server.agent_url("echo") + path, headers=sent, timeout=30)
    assert echo.status_code == status and echo.json()["error"]["message"] != "No agent at this URL"


def test_get_is_not_allowed_on_the_json_rpc_endpoint(server):
    response = httpx.get(server.agent_url("echo"))
    assert response.status_code == 405
    assert response.json()["error"]["code"] == -32600
