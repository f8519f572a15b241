"""The bindings' JSON answers (protocol/wire_json.py): orjson's text, the standard library's if refused."""

import datetime
import decimal
import json
import math
import uuid

import httpx
from django.core.serializers.json import DjangoJSONEncoder
from hypothesis import given, settings
from hypothesis import strategies as st

from tasks_app.protocol.wire_json import JsonAnswer, json_bytes
from tests.conftest import user_message
from tests.sse import read_events, stream

# What the bindings answer with: JSON values as the protobuf converters and the stored columns give them.
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES)
def test_the_text_reads_back_as_the_value_the_standard_library_would_give(value):
    assert json.loads(json_bytes(value)) == json.loads(json.dumps(value))


def test_what_orjson_refuses_is_written_by_the_standard_library():
    when = datetime.datetime(2026, 12, 4, 20, 30, 1, 123456, tzinfo=datetime.UTC)
    refused = {
        "big": 2**70,
        "surrogate": "\ud800",
        "decimal": decimal.Decimal("1.50"),
        "when": when,
        "ids": {1: "not a string key"},
    }
    for key, value in refused.items():
        written = json_bytes({key: value})
        assert written == json.dumps({key: value}, cls=DjangoJSONEncoder, separators=(",", ":")).encode()
    # Django's spelling of a time: milliseconds and Z.
    assert json.loads(json_bytes({"when": when})) == {"when": "2026-12-04T20:30:01.123Z"}
    assert json.loads(json_bytes({"big": 2**70})) == {"big": 2**70}


def test_a_number_that_is_not_finite_is_written_as_null_not_as_invalid_json():
    written = json_bytes({"a": math.nan, "b": [math.inf, -math.inf]})
    assert json.loads(written, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name))) == {
        "a": None,
        "b": [None, None],
    }


def test_an_answer_is_utf8_json_with_the_content_type_asked_for():
    answer = JsonAnswer({"text": "héllo 世界 🚀", "id": uuid.UUID(int=7)}, status=404)
    assert answer.status_code == 404
    assert answer["Content-Type"] == "application/json"
    assert answer.content == '{"text":"héllo 世界 🚀","id":"00000000-0000-0000-0000-000000000007"}'.encode()
    assert JsonAnswer({}, content_type="application/a2a+json")["Content-Type"] == "application/a2a+json"


TEXT = 'héllo 世界 🚀 "quoted" \\ \n tab\t'


def test_blocking_and_streamed_answers_carry_text_past_ascii_intact(server):
    body = {"jsonrpc": "2.0", "id": "w-1", "method": "SendMessage", **{"params": user_message(TEXT, "w-1")}}
    headers = {"A2A-Version": "1.0"}
    answer = httpx.post(server.agent_url("echo"), json=body, headers=headers, timeout=30)
    assert answer.status_code == 200
    assert "世界 🚀".encode() in answer.content  # UTF-8, not \u escapes
    task = answer.json()["result"]["task"]
    assert task["history"][0]["parts"] == [{"text": TEXT}]
    assert TEXT in task["artifacts"][0]["parts"][0]["text"]

    body = {**body, "id": "w-2", "method": "SendStreamingMessage", "params": user_message(TEXT, "w-2")}
    with stream(server.agent_url("echo"), body) as response:
        assert response.status_code == 200
        events = [event["data"]["result"] for event in read_events(response)]
    artifacts = [event["artifactUpdate"]["artifact"] for event in events if "artifactUpdate" in event]
    assert TEXT in artifacts[0]["parts"][0]["text"]
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
