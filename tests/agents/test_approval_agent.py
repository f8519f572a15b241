import httpx
import pytest

from tests.agents.conftest import artifact_text, new_id, status_text
from tests.conftest import user_message


def operator_answer(decision: str, task_id: str) -> dict:
    """The message tasks_app.operator.operator_authorize sends, built by hand.

    The test process cannot call that service (its broker has no worker), so the
    same parts travel over HTTP.
    """
    return {
        "message": {
            "role": "ROLE_USER",
            "messageId": new_id(),
            "taskId": task_id,
            "parts": [
                {"text": f"Authorization {decision} by alice"},
                {"data": {"authorization": decision, "by": "alice"}},
            ],
        }
    }


@pytest.fixture
def waiting_task(rpc) -> dict:
    task = rpc("SendMessage", user_message("Deploy release 1.4", new_id()), agent="approval")["result"][
        "task"
    ]
    assert task["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    return task


def test_it_is_seeded_as_a_public_demo_agent(server):
    card = httpx.get(server.agent_url("approval") + ".well-known/agent-card.json").json()
    assert card["skills"][0]["id"] == "approval"


def test_first_turn_asks_for_an_approval_and_says_what_is_needed(waiting_task):
    text = status_text(waiting_task)
    assert "Approval needed" in text
    assert "Deploy release 1.4" in text
    assert '"approve"' in text and '"deny"' in text
    assert "artifacts" not in waiting_task


def test_an_operator_grant_completes_it_and_names_who_approved(rpc, waiting_task):
    done = rpc("SendMessage", operator_answer("granted", waiting_task["id"]), agent="approval")["result"][
        "task"
    ]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert artifact_text(done) == 'Approved by alice: "Deploy release 1.4" was carried out.'


@pytest.mark.parametrize("reply", ["approve", "Yes, approved.", "grant"])
def test_a_plain_text_approval_completes_it(rpc, waiting_task, reply):
    done = rpc("SendMessage", user_message(reply, new_id(), taskId=waiting_task["id"]), agent="approval")
    task = done["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert artifact_text(task) == 'Approved: "Deploy release 1.4" was carried out.'


def test_an_operator_denial_rejects_it(rpc, waiting_task):
    task = rpc("SendMessage", operator_answer("denied", waiting_task["id"]), agent="approval")["result"][
        "task"
    ]
    assert task["status"]["state"] == "TASK_STATE_REJECTED"
    assert status_text(task) == 'Denied by alice: "Deploy release 1.4" was not carried out.'
    assert "artifacts" not in task


def test_a_plain_text_denial_rejects_it(rpc, waiting_task):
    reply = user_message("No. Denied.", new_id(), taskId=waiting_task["id"])
    task = rpc("SendMessage", reply, agent="approval")["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_REJECTED"


@pytest.mark.parametrize("reply", ["maybe later", "no, approve it"])
def test_an_unclear_answer_stays_auth_required_and_repeats_what_is_expected(rpc, waiting_task, reply):
    task_id = waiting_task["id"]
    still = rpc("SendMessage", user_message(reply, new_id(), taskId=task_id), agent="approval")["result"][
        "task"
    ]
    assert still["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    assert "neither an approval nor a denial" in status_text(still)
    assert '"approve"' in status_text(still)
    # The original request is still what a later approval approves.
    done = rpc("SendMessage", user_message("approved", new_id(), taskId=task_id), agent="approval")
    assert artifact_text(done["result"]["task"]) == 'Approved: "Deploy release 1.4" was carried out.'
