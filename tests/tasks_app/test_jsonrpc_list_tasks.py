import base64
import json
import uuid
from datetime import datetime

import pytest
from a2a.utils.errors import InvalidParamsError
from hypothesis import given
from hypothesis import strategies as st

from tasks_app import selectors
from tests.conftest import user_message


def _context_with_tasks(rpc, count: int) -> tuple[str, list[str]]:
    first = rpc("SendMessage", user_message("t0", f"list-{uuid.uuid4()}"))["result"]["task"]
    context_id, ids = first["contextId"], [first["id"]]
    for index in range(1, count):
        task = rpc("SendMessage", user_message(f"t{index}", f"list-{uuid.uuid4()}", contextId=context_id))
        ids.append(task["result"]["task"]["id"])
    return context_id, ids


def test_list_tasks_pages_newest_first_with_cursor(rpc):
    context_id, ids = _context_with_tasks(rpc, 3)
    first = rpc("ListTasks", {"contextId": context_id, "pageSize": 2})["result"]
    assert [task["id"] for task in first["tasks"]] == ids[::-1][:2]
    assert first["totalSize"] == 3 and first["pageSize"] == 2 and first["nextPageToken"]
    second = rpc("ListTasks", {"contextId": context_id, "pageSize": 2, "pageToken": first["nextPageToken"]})[
        "result"
    ]
    assert [task["id"] for task in second["tasks"]] == [ids[0]]
    assert second["nextPageToken"] == ""


def test_list_tasks_omits_artifacts_unless_asked_and_honours_history_length(rpc):
    context_id, _ = _context_with_tasks(rpc, 1)
    plain = rpc("ListTasks", {"contextId": context_id})["result"]["tasks"][0]
    assert "artifacts" not in plain and len(plain["history"]) == 2
    full = rpc("ListTasks", {"contextId": context_id, "includeArtifacts": True, "historyLength": 0})["result"]
    assert "artifacts" in full["tasks"][0] and "history" not in full["tasks"][0]


def test_list_tasks_filters_by_state_and_status_time(rpc):
    context_id, ids = _context_with_tasks(rpc, 2)
    completed = rpc("ListTasks", {"contextId": context_id, "status": "TASK_STATE_COMPLETED"})["result"]
    assert completed["totalSize"] == 2
    working = rpc("ListTasks", {"contextId": context_id, "status": "TASK_STATE_WORKING"})["result"]
    assert working["tasks"] == [] and working["totalSize"] == 0
    future = rpc("ListTasks", {"contextId": context_id, "statusTimestampAfter": "2999-01-01T00:00:00Z"})[
        "result"
    ]
    assert future["tasks"] == []
    everything = rpc("ListTasks", {"contextId": context_id, "statusTimestampAfter": "2000-01-01T00:00:00Z"})[
        "result"
    ]
    assert {task["id"] for task in everything["tasks"]} == set(ids)


def test_list_tasks_rejects_bad_page_size_and_token(rpc):
    assert rpc("ListTasks", {"pageSize": 500})["error"]["code"] == -32602
    assert rpc("ListTasks", {"pageSize": 0})["error"]["code"] == -32602
    assert rpc("ListTasks", {"pageToken": "garbage"})["error"]["code"] == -32602
    assert rpc("ListTasks", {"historyLength": -3})["error"]["code"] == -32602


def _token(data) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode()


@pytest.mark.parametrize(
    "position",
    [
        {"ts": "2024-01-01T00:00:00+00:00", "id": 5},  # uuid.UUID(5): AttributeError
        {"ts": "0001-01-01T00:00:00+14:00", "id": str(uuid.uuid4())},  # before year 1 in UTC
        {"ts": "2024-01-01T00:00:00", "id": str(uuid.uuid4())},  # no offset
        {"ts": 1700000000, "id": str(uuid.uuid4())},
        ["2024-01-01T00:00:00+00:00", str(uuid.uuid4())],
    ],
)
def test_list_tasks_refuses_a_made_up_page_token_as_invalid_params(rpc, position):
    answer = rpc("ListTasks", {"pageToken": _token(position)})
    assert answer["error"]["code"] == -32602, answer


def test_list_tasks_refuses_a_page_token_nested_too_deep_to_read(rpc):
    token = base64.urlsafe_b64encode(b"[" * 5000).decode()
    assert rpc("ListTasks", {"pageToken": token})["error"]["code"] == -32602


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
IDS = st.uuids().map(str)
STAMPS = st.datetimes(timezones=st.timezones()).map(datetime.isoformat) | st.text(max_size=40)


@given(
    st.one_of(
        JSON_VALUES.map(_token),
        st.fixed_dictionaries({"ts": STAMPS | JSON_VALUES, "id": IDS | JSON_VALUES}).map(_token),
        st.text(max_size=60),
    )
)
def test_a_page_token_is_a_position_or_invalid_params(token):
    """Whatever a caller sends as pageToken reads as a position in UTC, or is refused as InvalidParams."""
    try:
        after, pk = selectors._parse_page_token(token)
    except InvalidParamsError:
        return
    assert after.utcoffset().total_seconds() == 0 and isinstance(pk, uuid.UUID)


def test_extended_card_is_refused_on_a_public_agent(rpc):
    assert rpc("GetExtendedAgentCard")["error"]["code"] == -32004
