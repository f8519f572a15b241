import httpx
from a2a.client import ClientConfig, create_client
from a2a.helpers import get_message_text, new_text_message
from a2a.types import Role, SendMessageRequest, TaskState

from agents.builtin.clarify import QUESTION
from tests.agents.conftest import artifact_text, new_id, status_text
from tests.conftest import user_message


def test_it_is_seeded_as_a_public_demo_agent(server):
    card = httpx.get(server.agent_url("clarify") + ".well-known/agent-card.json").json()
    assert card["skills"][0]["id"] == "clarify"
    assert "question" in card["description"]


def test_it_asks_a_question_then_completes_with_the_request_and_the_answer(rpc):
    first = rpc("SendMessage", user_message("Summarise the Q3 report", new_id()), agent="clarify")["result"][
        "task"
    ]
    assert first["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert status_text(first) == QUESTION

    answer = user_message("For the board, one page", new_id(), taskId=first["id"])
    second = rpc("SendMessage", answer, agent="clarify")["result"]["task"]
    assert second["id"] == first["id"]
    assert second["status"]["state"] == "TASK_STATE_COMPLETED"
    text = artifact_text(second)
    assert "Summarise the Q3 report" in text
    assert "For the board, one page" in text
    # The whole conversation is on the task: request, question, answer, final word.
    history = [message["role"] for message in second["history"]]
    assert history.count("ROLE_USER") == 2


async def test_sdk_streaming_client_does_the_input_required_round_trip(server, stored):
    client = await create_client(server.agent_url("clarify"), client_config=ClientConfig(streaming=True))
    try:
        request = SendMessageRequest(message=new_text_message("Plan a team offsite", role=Role.ROLE_USER))
        first = [event async for event in client.send_message(request)]
        task = first[0].task
        asked = first[-1].status_update.status
        assert asked.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert get_message_text(asked.message) == QUESTION

        reply = new_text_message("Twelve people, two days", role=Role.ROLE_USER)
        reply.task_id, reply.context_id = task.id, task.context_id
        second = [event async for event in client.send_message(SendMessageRequest(message=reply))]
    finally:
        await client.close()
    # The follow-up's stream opens with the current Task, which may already be
    # the finished one when the agent was quick; then it holds the artifact.
    last = second[-1]
    final = last.task.status if last.HasField("task") else last.status_update.status
    assert final.state == TaskState.TASK_STATE_COMPLETED
    artifacts = [e.artifact_update.artifact for e in second if e.HasField("artifact_update")]
    artifacts += [artifact for e in second if e.HasField("task") for artifact in e.task.artifacts]
    assert len(artifacts) >= 1
    text = artifacts[-1].parts[0].text
    assert "Plan a team offsite" in text
    assert "Twelve people, two days" in text
