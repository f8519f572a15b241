"""Hostile or broken input on every binding: a clear error code, never a 500 or -32603, nothing stored.

One test per reviewed defect. The NUL and length cases only break on PostgreSQL
(SQLite stores anything), so they matter most in the services-mode run.
"""

import json
import uuid

import httpx
import pytest
from django.conf import settings

from agents.models import Agent
from tasks_app.models import Message, Task
from tenants.models import Tenant
from tests.conftest import user_message
from tests.tasks_app.legacy_helpers import other_tenant_echo, stored_counts, unique

V1 = {"A2A-Version": "1.0"}
JSON = {"Content-Type": "application/json"}


def rest(server, path: str) -> str:
    return server.agent_url("echo") + "rest/" + path


def rpc_raw(server, content: str | bytes, headers: dict | None = None) -> httpx.Response:
    """POST a JSON-RPC body as given (already serialized) to the echo agent."""
    return httpx.post(
        server.agent_url("echo"), content=content, headers={**JSON, **(headers or {})}, timeout=60
    )


def rpc_error(response: httpx.Response, status: int = 200) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json"), response.text
    body = response.json()
    assert "result" not in body, body
    return body["error"]


def rest_error(response: httpx.Response, status: int, reason: str | None = None) -> dict:
    """The google.rpc.Status body of a REST error, checked against the HTTP status."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json"), response.text
    error = response.json()["error"]
    assert error["code"] == status and error["message"] and error["status"]
    if reason is not None:
        info = next(d for d in error["details"] if d["@type"].endswith("ErrorInfo"))
        assert info["reason"] == reason
    return error


def envelope(method: str, params: dict | str) -> str:
    """A JSON-RPC body; params may be pre-serialized JSON text (for nesting json.dumps refuses)."""
    params_text = params if isinstance(params, str) else json.dumps(params)
    return f'{{"jsonrpc": "2.0", "id": "bad-1", "method": "{method}", "params": {params_text}}}'


def nested_object(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


def message_v1(message_id: str, parts: list, **fields) -> dict:
    return {"message": {"role": "ROLE_USER", "messageId": message_id, "parts": parts, **fields}}


def test_deeply_nested_json_is_a_parse_error_not_a_crash(server, stored):
    before = stored_counts()
    brackets = "[" * 100_000 + "]" * 100_000
    # The JSON-RPC endpoint, whichever dialect the body would have been.
    error = rpc_error(rpc_raw(server, brackets, V1))
    assert error["code"] == -32700
    deep_part = '{"data": ' + nested_object(5000) + "}"
    v1_params = '{"message": {"role": "ROLE_USER", "messageId": "deep-1", "parts": [' + deep_part + "]}}"
    assert rpc_error(rpc_raw(server, envelope("SendMessage", v1_params), V1))["code"] == -32700
    v03_part = '{"kind": "data", "data": ' + nested_object(5000) + "}"
    v03_params = (
        '{"message": {"kind": "message", "role": "user", "messageId": "deep-2", "parts": [' + v03_part + "]}}"
    )
    assert rpc_error(rpc_raw(server, envelope("message/send", v03_params)))["code"] == -32700
    draft_part = '{"type": "data", "data": ' + nested_object(5000) + "}"
    draft_params = '{"id": "deep-draft", "message": {"role": "user", "parts": [' + draft_part + "]}}"
    assert rpc_error(rpc_raw(server, envelope("tasks/send", draft_params)))["code"] == -32700
    # Parseable, but deeper than protobuf copes with: invalid params, not an internal error.
    medium = json.loads(nested_object(40))
    v1_medium = message_v1("deep-3", [{"data": medium}])
    assert rpc_error(rpc_raw(server, envelope("SendMessage", v1_medium), V1))["code"] == -32602
    v03_medium = {
        "message": {
            "kind": "message",
            "role": "user",
            "messageId": "deep-4",
            "parts": [{"kind": "data", "data": medium}],
        }
    }
    assert rpc_error(rpc_raw(server, envelope("message/send", v03_medium)))["code"] == -32602
    # HTTP+JSON: 400 with the A2A error body.
    for content in (brackets, v1_params):
        response = httpx.post(
            rest(server, "message:send"), content=content, headers={**V1, **JSON}, timeout=60
        )
        rest_error(response, 400, "INVALID_REQUEST")
    assert stored_counts() == before


def test_a_body_over_the_size_limit_is_payload_too_large(server, stored):
    before = stored_counts()
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 9, "method": "SendMessage", "params": user_message("x" * limit, "too-big-1")}
    )
    error = rpc_error(rpc_raw(server, body, V1), 413)
    assert error["code"] == -32600
    assert "too large" in error["message"].lower()
    response = httpx.post(
        rest(server, "message:send"),
        content=json.dumps(user_message("x" * limit, "too-big-2")),
        headers={**V1, **JSON},
        timeout=60,
    )
    assert "too large" in rest_error(response, 413)["message"].lower()
    assert stored_counts() == before


def test_overlong_ids_and_nul_characters_are_invalid_params(server, rpc, stored):
    before = stored_counts()
    long_id = "m" * 256
    cases = [
        ("SendMessage", user_message("hi", long_id), "messageId"),
        ("SendMessage", user_message("hi", unique("long-ctx"), contextId="c" * 256), "contextId"),
        ("SendMessage", user_message("a\x00b", unique("nul-text")), "parts[0].text"),
        ("SendMessage", user_message("hi", "nul\x00id"), "messageId"),
        ("SendMessage", user_message("hi", unique("nul-meta"), metadata={"k": "v\x00"}), "metadata"),
        ("GetTask", {"id": "a\x00b"}, "id"),
        ("CancelTask", {"id": "a\x00b"}, "id"),
        ("ListTasks", {"contextId": "a\x00b"}, "contextId"),
    ]
    for method, params, field in cases:
        error = rpc(method, params)["error"]
        assert error["code"] == -32602, (method, params, error)
        assert field in error["message"], error
    # The 0.3 and draft dialects reach the same check.
    v03_send = {
        "message": {
            "kind": "message",
            "role": "user",
            "messageId": long_id,
            "parts": [{"kind": "text", "text": "hi"}],
        }
    }
    v03_error = rpc_error(rpc_raw(server, envelope("message/send", v03_send)))
    assert v03_error["code"] == -32602 and "messageId" in v03_error["message"]
    assert rpc_error(rpc_raw(server, envelope("tasks/get", {"id": "a\x00b"})))["code"] == -32602
    draft_send = {"id": "nul\x00task", "message": {"role": "user", "parts": [{"type": "text", "text": "hi"}]}}
    assert rpc_error(rpc_raw(server, envelope("tasks/send", draft_send)))["code"] == -32602
    draft_text = {
        "id": unique("draft-nul"),
        "message": {"role": "user", "parts": [{"type": "text", "text": "\x00"}]},
    }
    assert rpc_error(rpc_raw(server, envelope("tasks/send", draft_text)))["code"] == -32602
    # HTTP+JSON: 400 INVALID_ARGUMENT naming the field.
    response = httpx.post(
        rest(server, "message:send"), json=user_message("hi", long_id), headers=V1, timeout=30
    )
    assert "messageId" in rest_error(response, 400, "INVALID_PARAMS")["message"]
    get = httpx.get(rest(server, "tasks/a%00b"), headers=V1)
    assert "id" in rest_error(get, 400, "INVALID_PARAMS")["message"]
    listing = httpx.get(rest(server, "tasks?contextId=a%00b"), headers=V1)
    assert "contextId" in rest_error(listing, 400, "INVALID_PARAMS")["message"]
    assert stored_counts() == before


def test_a_part_without_content_is_refused_and_stored_ones_do_not_break_0_3(server, rpc, stored):
    before = stored_counts()
    error = rpc("SendMessage", message_v1(unique("empty-part"), [{}]))["error"]
    assert error["code"] == -32602 and "parts[0]" in error["message"]
    response = httpx.post(
        rest(server, "message:send"), json=message_v1(unique("empty-part"), [{"text": "ok"}, {}]), headers=V1
    )
    assert "parts[1]" in rest_error(response, 400, "INVALID_PARAMS")["message"]
    assert stored_counts() == before
    # A row stored before this check existed: 0.3 answers without the part it cannot show.
    message_id = unique("old-row")
    task = rpc("SendMessage", user_message("kept", message_id))["result"]["task"]
    Message.objects.filter(message_id=message_id).update(parts=[{"text": "kept"}, {}])
    answer = json.loads(rpc_raw(server, envelope("tasks/get", {"id": task["id"]})).text)
    assert "error" not in answer, answer
    sent = next(m for m in answer["result"]["history"] if m["messageId"] == message_id)
    assert sent["parts"] == [{"kind": "text", "text": "kept"}]


def test_bad_base64_is_refused_instead_of_altered(server, rpc, stored):
    before = stored_counts()
    error = rpc("SendMessage", message_v1(unique("b64"), [{"raw": "!!!notb64"}]))["error"]
    assert error["code"] == -32602 and "parts[0].raw is not valid base64" in error["message"]
    response = httpx.post(
        rest(server, "message:send"), json=message_v1(unique("b64"), [{"raw": "a b"}]), headers=V1, timeout=30
    )
    assert "base64" in rest_error(response, 400, "INVALID_PARAMS")["message"]
    draft = {
        "id": unique("draft-b64"),
        "message": {"role": "user", "parts": [{"type": "file", "file": {"bytes": "@@@"}}]},
    }
    draft_error = rpc_error(rpc_raw(server, envelope("tasks/send", draft)))
    assert draft_error["code"] == -32602 and "file.bytes is not valid base64" in draft_error["message"]
    assert stored_counts() == before
    # ProtoJSON's other spellings (URL-safe alphabet, no padding) are still accepted, unaltered.
    message_id = unique("b64-ok")
    task = rpc("SendMessage", message_v1(message_id, [{"raw": "-_-_aGk"}]))["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert Message.objects.get(message_id=message_id).parts == [{"raw": "+/+/aGk="}]


def test_list_tasks_refuses_unknown_states_and_booleans(server, rpc, stored):
    for query in ({"status": "BOGUS"}, {"includeArtifacts": "maybe"}, {"pageSize": "many"}):
        rest_error(httpx.get(rest(server, "tasks"), params=query, headers=V1), 400, "INVALID_PARAMS")
    ok = httpx.get(
        rest(server, "tasks"),
        params={"includeArtifacts": "TRUE", "status": "TASK_STATE_COMPLETED"},
        headers=V1,
    )
    assert ok.status_code == 200, ok.text
    error = rpc("ListTasks", {"status": "FOO"})["error"]
    assert error["code"] == -32602 and "FOO" in error["message"]
    assert "tasks" in rpc("ListTasks", {"status": "TASK_STATE_COMPLETED"})["result"]


def test_rest_405_says_which_methods_are_allowed(server):
    task_id = str(uuid.uuid4())
    for verb, path, allowed in [
        ("DELETE", f"tasks/{task_id}", "GET"),
        ("DELETE", f"demo/tasks/{task_id}", "GET"),
        ("GET", "message:send", "POST"),
        ("PUT", f"tasks/{task_id}:subscribe", "GET, POST"),
        ("PUT", f"tasks/{task_id}/pushNotificationConfigs/c1", "DELETE, GET"),
    ]:
        response = httpx.request(verb, rest(server, path), headers=V1)
        rest_error(response, 405)
        assert response.headers["Allow"] == allowed, (verb, path, response.headers)


def test_draft_errors_name_the_clients_own_task_id(server, stored):
    task_id = unique("task-2024-0715")
    send = {"id": task_id, "message": {"role": "user", "parts": [{"type": "text", "text": "hi"}]}}
    created = json.loads(rpc_raw(server, envelope("tasks/send", send)).text)["result"]
    assert created["id"] == task_id and created["status"]["state"] == "completed"
    internal_id = str(Task.objects.get(draft_alias__client_task_id=task_id).pk)
    # A new message to the finished task (the same one again would be a resend, answered with the task).
    follow_up = {**send, "message": {"role": "user", "parts": [{"type": "text", "text": "more"}]}}
    again = rpc_error(rpc_raw(server, envelope("tasks/send", follow_up)))
    cancel = rpc_error(rpc_raw(server, envelope("tasks/cancel", {"id": task_id})))
    assert (again["code"], cancel["code"]) == (-32004, -32002)
    for error in (again, cancel):
        assert task_id in error["message"] and internal_id not in error["message"], error


def test_the_version_message_fits_an_explicit_0_3_and_a_missing_header(server, stored):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t"}})
    explicit = rpc_error(rpc_raw(server, body, {"A2A-Version": "0.3"}))
    missing = rpc_error(rpc_raw(server, body))
    assert explicit["code"] == missing["code"] == -32009
    assert "'0.3'" in explicit["message"] and "no A2A-Version header" not in explicit["message"]
    assert "no A2A-Version header means 0.3" in missing["message"]
    rest_explicit = rest_error(httpx.get(rest(server, "tasks/t"), headers={"A2A-Version": "0.3"}), 400)
    assert "no A2A-Version header" not in rest_explicit["message"]


# Found by the fuzz (test_fuzz_bindings.py): each was a -32603 or an HTTP 500 (or HTML) before.

# JSON's bare tokens that Python's json reads, and numbers beyond a double (json reads 1e400 as inf).
NON_FINITE = ["NaN", "Infinity", "-Infinity", "1e400", "-1" + "0" * 400]
NUMBER = "<number>"


def with_number(params: dict, number: str) -> str:
    """params as JSON text, with the bare number token where the dict holds NUMBER."""
    return json.dumps(params).replace(json.dumps(NUMBER), number)


@pytest.fixture(scope="module")
def known_task(server, stored) -> str:
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": user_message("hi", unique("k"))}
    )
    return json.loads(rpc_raw(server, body, V1).text)["result"]["task"]["id"]


def test_nan_and_infinity_in_a_struct_are_invalid_params_on_every_binding(server, known_task, stored):
    before = stored_counts()
    for number in NON_FINITE:
        v1 = [
            ("SendMessage", message_v1(unique("nan"), [{"data": {"x": [1, NUMBER]}}]), "parts[0].data.x[1]"),
            (
                "SendMessage",
                message_v1(unique("nan"), [{"text": "hi"}], metadata={"m": NUMBER}),
                "message.metadata.m",
            ),
            ("SendMessage", {**user_message("hi", unique("nan")), "metadata": {"m": NUMBER}}, "metadata.m"),
            ("CancelTask", {"id": known_task, "metadata": {"m": NUMBER}}, "metadata.m"),
        ]
        for method, params, field in v1:
            error = rpc_error(rpc_raw(server, envelope(method, with_number(params, number)), V1))
            assert error["code"] == -32602 and field in error["message"], (number, error)
        send = with_number(message_v1(unique("nan"), [{"data": {"x": NUMBER}}]), number)
        response = httpx.post(rest(server, "message:send"), content=send, headers={**V1, **JSON}, timeout=30)
        assert "parts[0].data.x" in rest_error(response, 400, "INVALID_PARAMS")["message"]
        cancel = with_number({"metadata": {"m": NUMBER}}, number)
        response = httpx.post(
            rest(server, f"tasks/{known_task}:cancel"), content=cancel, headers={**V1, **JSON}, timeout=30
        )
        rest_error(response, 400, "INVALID_PARAMS")
        # The 0.3 dialect builds its protos with the SDK's conversions, not from ProtoJSON.
        v03_message = {"kind": "message", "role": "user", "messageId": unique("nan")}
        for v03 in (
            {"message": {**v03_message, "parts": [{"kind": "data", "data": {"x": NUMBER}}]}},
            {
                "message": {
                    **v03_message,
                    "parts": [{"kind": "text", "text": "hi"}],
                    "metadata": {"m": NUMBER},
                }
            },
            {
                "message": {**v03_message, "parts": [{"kind": "text", "text": "hi"}]},
                "metadata": {"m": NUMBER},
            },
        ):
            error = rpc_error(rpc_raw(server, envelope("message/send", with_number(v03, number))))
            assert error["code"] == -32602, (number, error)
        draft = {
            "id": unique("draft-nan"),
            "message": {"role": "user", "parts": [{"type": "data", "data": {"x": NUMBER}}]},
        }
        error = rpc_error(rpc_raw(server, envelope("tasks/send", with_number(draft, number))))
        assert error["code"] == -32602, (number, error)
    assert stored_counts() == before


def test_nan_in_a_push_config_is_invalid_params_naming_the_field(server, known_task, stored):
    config = {"taskId": known_task, "url": "https://127.0.0.1/hook", "token": NUMBER}
    error = rpc_error(
        rpc_raw(server, envelope("CreateTaskPushNotificationConfig", with_number(config, "NaN")), V1)
    )
    assert error["code"] == -32602 and "token is NaN" in error["message"], error
    v03 = {"taskId": known_task, "pushNotificationConfig": {"url": "https://127.0.0.1/hook", "token": NUMBER}}
    error = rpc_error(rpc_raw(server, envelope("tasks/pushNotificationConfig/set", with_number(v03, "NaN"))))
    assert error["code"] == -32602, error


def test_a_history_length_beyond_int32_is_invalid_params_in_the_old_dialects(server, known_task, stored):
    draft_id = unique("draft-long-history")
    send = {"id": draft_id, "message": {"role": "user", "parts": [{"type": "text", "text": "hi"}]}}
    assert "result" in json.loads(rpc_raw(server, envelope("tasks/send", send)).text)
    for task_id in (known_task, draft_id):  # answered by 0.3, then by the draft
        error = rpc_error(rpc_raw(server, envelope("tasks/get", {"id": task_id, "historyLength": 2**31})))
        assert error["code"] == -32602 and "historyLength" in error["message"], error


def test_a_rest_path_with_an_encoded_newline_gets_a_status_body_not_html(server, stored):
    for path in ("tasks/a%0Ab", "tasks/a%0A", "tasks/x/pushNotificationConfigs/c%0A1", "demo/tasks/%0A"):
        response = httpx.get(rest(server, path), headers=V1, timeout=30)
        rest_error(response, 404, "TASK_NOT_FOUND")


@pytest.mark.parametrize("version", ["2.0", "abc"])
def test_an_older_dialects_method_naming_an_unsupported_version_is_version_not_supported(
    server, stored, version
):
    # The endpoint speaks 1.x and 0.x (no header is 0.3); a client asking for another
    # version gets -32009, as the card's URL and the 1.0 methods answer it, and nothing is served.
    before = stored_counts()
    sends = {
        "message/send": {
            "message": {
                "kind": "message",
                "role": "user",
                "messageId": unique("v2"),
                "parts": [{"kind": "text", "text": "hi"}],
            }
        },
        "tasks/send": {
            "id": unique("v2-draft"),
            "message": {"role": "user", "parts": [{"type": "text", "text": "hi"}]},
        },
        "tasks/get": {"id": str(uuid.uuid4())},
    }
    for method, params in sends.items():
        error = rpc_error(rpc_raw(server, envelope(method, params), {"A2A-Version": version}))
        assert error["code"] == -32009, (method, error)
        assert version in error["message"]
    assert stored_counts() == before


def test_an_unpaired_surrogate_in_an_older_dialects_id_is_invalid_params(server, stored):
    # JSON may escape half a surrogate pair ("\ud800"): no UTF-8 text holds it, so no
    # lookup or proto takes it. The 1.0 methods refused it already; these were -32603.
    before = stored_counts()
    task = str(uuid.uuid4())
    half = "\\ud800"
    draft_message = '{"role": "user", "parts": [{"type": "text", "text": "hi"}]}'
    for method, params in (
        ("tasks/send", f'{{"id": "{half}", "message": {draft_message}}}'),
        ("tasks/get", f'{{"id": "{half}"}}'),
        ("tasks/cancel", f'{{"id": "a{half}"}}'),
        ("tasks/pushNotification/get", f'{{"id": "{half}"}}'),
        ("tasks/pushNotificationConfig/list", f'{{"id": "{half}"}}'),
        ("tasks/pushNotificationConfig/get", f'{{"id": "{task}", "pushNotificationConfigId": "{half}"}}'),
        ("tasks/pushNotificationConfig/delete", f'{{"id": "{task}", "pushNotificationConfigId": "{half}"}}'),
    ):
        error = rpc_error(rpc_raw(server, envelope(method, params)))
        assert error["code"] == -32602, (method, error)
    assert stored_counts() == before


@pytest.mark.parametrize("segment", ["ech.o", "ech%20o", "%C3%A9cho", "ech%FFo", "ec%00ho", "ec%0Aho"])
def test_a_url_segment_no_slug_can_be_gets_the_bindings_json_404_as_an_unknown_agent(server, stored, segment):
    # Django's converters refused these names before any view saw them: its HTML 404 page
    # (with DEBUG, the URL patterns too) on every A2A route. Each answers as for an agent
    # that does not exist, or is another tenant's, so neither tells anything apart.
    base = f"{server.base_url}/a2a"
    rpc = envelope("GetTask", {"id": str(uuid.uuid4())})

    def answers(tenant: str, agent: str) -> list:
        rest_answer = httpx.get(f"{base}/{tenant}/{agent}/rest/tasks/{uuid.uuid4()}", headers=V1, timeout=30)
        rest_error(rest_answer, 404, "METHOD_NOT_FOUND")
        found = [rest_answer.json()]
        for url in (f"{base}/{tenant}/{agent}/", f"{base}/{tenant}/{agent}"):
            error = rpc_error(rpc_raw_to(url, rpc, V1), 404)
            assert error["code"] == -32601, (url, error)
            found.append(error)
        for card in ("agent-card.json", "agent.json"):
            response = httpx.get(f"{base}/{tenant}/{agent}/.well-known/{card}", timeout=30)
            assert response.status_code == 404, response.text[:300]
            assert response.headers["content-type"] == "application/json", response.text[:300]
            found.append(response.json())
        return found

    unknown = answers("demo", "no-such-agent")
    assert answers("no-such-tenant", "echo") == unknown
    # An agent of another tenant, under demo's URL.
    globex = Tenant.objects.get(slug=other_tenant_echo())
    Agent.objects.get_or_create(
        tenant=globex, slug="globex-only", defaults={"name": "Globex only", "handler": "echo"}
    )
    assert answers("demo", "globex-only") == unknown
    assert answers("demo", segment) == unknown
    assert answers(segment, "echo") == unknown
    catalog = httpx.get(f"{base}/{segment}/", timeout=30)
    assert catalog.status_code == 404 and catalog.json() == {"error": "No agents at this URL"}


@pytest.mark.parametrize(
    "path", ["a2a/demo/echo/other", "a2a/demo/echo/.well-known/other", "a2a/", "a2a//echo/", "a2a"]
)
def test_any_other_url_under_a2a_is_a_json_404(server, stored, path):
    for verb in ("GET", "POST", "DELETE"):
        response = httpx.request(verb, f"{server.base_url}/{path}", headers={**V1, **JSON}, timeout=30)
        assert response.status_code == 404, (verb, response.text[:300])
        assert response.json() == {"error": "Nothing at this URL"}, verb


def test_a_post_to_the_rest_bindings_url_without_its_slash_is_its_json_404(server, stored):
    # No redirect (it would drop the body), no HTML page: the binding's own "no operation here".
    response = httpx.post(
        f"{server.base_url}/a2a/demo/echo/rest", content="{}", headers={**V1, **JSON}, timeout=30
    )
    rest_error(response, 404, "METHOD_NOT_FOUND")


@pytest.mark.parametrize("path", ["a2a/demo/echo/rest", "a2a/demo", "a2a"])
def test_a_post_to_a_url_without_its_trailing_slash_is_not_found_not_a_500(server, stored, path):
    # Django redirects to the URL with a slash, which loses a POST's body; with DEBUG
    # on (the embedded default) it raised instead, a 500. The URL is simply unknown.
    before = stored_counts()
    url = f"{server.base_url}/{path}"
    body = envelope("SendMessage", message_v1(unique("no-slash"), [{"text": "hi"}]))
    response = httpx.post(url, content=body, headers={**V1, **JSON}, timeout=60)
    assert response.status_code == 404, (response.status_code, response.text[:300])
    assert stored_counts() == before


def test_the_tenants_url_without_its_slash_redirects_a_get_and_answers_anything_else_in_json(server, stored):
    # Django's own 404 for a POST here was an HTML page; a browser's GET still finds the catalog.
    url = f"{server.base_url}/a2a/demo"
    for verb in ("POST", "PUT", "DELETE"):
        response = httpx.request(verb, url, content="{}", headers={**V1, **JSON}, timeout=30)
        assert response.status_code == 404, (verb, response.text[:300])
        assert response.json() == {"error": "Nothing at this URL"}, verb
    response = httpx.get(url + "?x=1", headers=V1, timeout=30)
    assert response.status_code == 301
    assert response.headers["location"].endswith("/a2a/demo/?x=1")
    catalog = httpx.get(url, headers=V1, timeout=30, follow_redirects=True)
    assert catalog.status_code == 200
    assert str(catalog.url).endswith("/a2a/demo/")
    assert any("/a2a/demo/echo/" in json.dumps(card) for card in catalog.json()["agents"])


def test_the_agents_json_rpc_url_without_its_trailing_slash_is_served_as_with_it(server, stored):
    # A client that trims the card's URL: its POST is the call, not a redirect that drops the body.
    message_id = unique("no-slash")
    body = envelope("SendMessage", message_v1(message_id, [{"text": "hi"}]))
    url = server.agent_url("echo").rstrip("/")
    response = httpx.post(url, content=body, headers={**V1, **JSON}, timeout=60)
    assert response.status_code == 200, (response.status_code, response.text[:300])
    task = response.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["history"][0]["messageId"] == message_id


def test_a_query_string_with_too_many_fields_is_a_bad_request_on_every_binding(server, stored):
    # Django refuses to read more than DATA_UPLOAD_MAX_NUMBER_FIELDS query fields; where the
    # bindings read the query (A2A-Version, ListTasks' filters), that was an internal error.
    query = "&".join(f"f{i}=1" for i in range(settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + 1))
    body = envelope("GetTask", {"id": str(uuid.uuid4())})
    # JSON-RPC without the A2A-Version header looks for it in the query.
    error = rpc_error(rpc_raw_to(server.agent_url("echo") + "?" + query, body, {}), 400)
    assert error["code"] == -32600, error
    listed = httpx.get(rest(server, "tasks?" + query), headers=V1, timeout=60)
    rest_error(listed, 400, "INVALID_REQUEST")
    # The card, the tenant's catalog and the management API: a 400 too, never a 500.
    for url in (
        server.agent_url("echo") + ".well-known/agent-card.json",
        f"{server.base_url}/a2a/demo/",
        f"{server.base_url}/api/v1/tenants/",
    ):
        assert httpx.get(f"{url}?{query}", timeout=60).status_code == 400, url


def rpc_raw_to(url: str, content: str, headers: dict) -> httpx.Response:
    return httpx.post(url, content=content, headers={**JSON, **headers}, timeout=60)


@pytest.mark.parametrize("version", ["1.x", "1.0beta", "1..0", "1.0.0.0.1a"])
def test_a_version_that_is_no_major_minor_is_version_not_supported(server, stored, version):
    # "1.x" is no version to serve a request by (a2a-sdk refuses it too); only its
    # first character was looked at, and the request was served as 1.0.
    body = envelope("GetTask", {"id": str(uuid.uuid4())})
    error = rpc_error(rpc_raw(server, body, {"A2A-Version": version}))
    assert error["code"] == -32009, error
    answer = httpx.get(rest(server, f"tasks/{uuid.uuid4()}"), headers={"A2A-Version": version}, timeout=60)
    rest_error(answer, 400, "VERSION_NOT_SUPPORTED")
    card_url = server.agent_url("echo") + ".well-known/agent-card.json"
    card = httpx.get(card_url, headers={"A2A-Version": version}, timeout=60)
    assert card.status_code == 400


def test_an_unknown_field_named_by_an_unpaired_surrogate_is_invalid_params(server, stored):
    # Unknown fields are ignored, but protobuf's lookup of this name raised SystemError: -32603 / 500.
    before = stored_counts()
    params = '{"message": {"role": "ROLE_USER", "messageId": "half-key", "parts": [{"\\ud800": null}]}}'
    error = rpc_error(rpc_raw(server, envelope("SendMessage", params), V1))
    assert error["code"] == -32602, error
    answer = httpx.post(
        rest(server, "message:send"),
        content=params.replace('"half-key"', '"half-key-2"'),
        headers={**V1, **JSON},
        timeout=60,
    )
    rest_error(answer, 400, "INVALID_PARAMS")
    assert stored_counts() == before


def test_an_enum_value_of_an_unpaired_surrogate_is_invalid_params(server, stored):
    # The enum check's lookup of the name in protobuf's table raised UnicodeEncodeError: -32603 / 500
    # (found by test_fuzz_bindings in CI).
    before = stored_counts()
    for field, params in (
        ("message.role", '{"message": {"role": "\\ud800", "messageId": "half-enum", "parts": []}}'),
        (
            "message.parts[0].data",  # an enum inside a Struct is no enum: only its text is checked
            '{"message": {"role": "ROLE_USER", "messageId": "half-enum", "parts": [{"data": "\\ud800"}]}}',
        ),
    ):
        error = rpc_error(rpc_raw(server, envelope("SendMessage", params), V1))
        assert error["code"] == -32602, (field, error)
        answer = httpx.post(rest(server, "message:send"), content=params, headers={**V1, **JSON}, timeout=60)
        rest_error(answer, 400, "INVALID_PARAMS")
    assert stored_counts() == before


def test_params_by_position_are_invalid_params_and_a_scalar_is_an_invalid_request(server, stored):
    # JSON-RPC 2.0 allows params as an array; A2A's methods take theirs by name: -32602,
    # as a2a-sdk answers. A scalar is no JSON-RPC request at all: -32600.
    for method in ("GetTask", "tasks/get", "message/send", "tasks/send"):
        body = f'{{"jsonrpc": "2.0", "id": 1, "method": "{method}", "params": ["{uuid.uuid4()}"]}}'
        assert rpc_error(rpc_raw(server, body, V1 if method[0].isupper() else {}))["code"] == -32602, method
    scalar = '{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": "x"}'
    assert rpc_error(rpc_raw(server, scalar, V1))["code"] == -32600
    unknown = '{"jsonrpc": "2.0", "id": 1, "method": "NoSuchMethod", "params": [1]}'
    assert rpc_error(rpc_raw(server, unknown, V1))["code"] == -32601
