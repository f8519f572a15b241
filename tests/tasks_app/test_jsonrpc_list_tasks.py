import uuid

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


def test_extended_card_is_refused_on_a_public_agent(rpc):
    assert rpc("GetExtendedAgentCard")["error"]["code"] == -32004
