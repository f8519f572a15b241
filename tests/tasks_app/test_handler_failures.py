import uuid

from agents.models import Agent
from tenants.models import Tenant
from tests.conftest import user_message


def _agent(slug: str, handler: str) -> None:
    Agent.objects.get_or_create(
        tenant=Tenant.objects.get(slug="demo"),
        slug=slug,
        defaults={"name": slug, "handler": handler},
    )


def test_a_crashing_handler_fails_the_task_with_a_readable_message(rpc, stored):
    _agent("crashy", "crash")
    task = rpc("SendMessage", user_message("boom", f"crash-{uuid.uuid4()}"), agent="crashy")["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    text = task["status"]["message"]["parts"][0]["text"]
    assert "ValueError" in text and "the model returned nonsense" in text
    # The server keeps serving.
    after = rpc("SendMessage", user_message("still there?", f"after-crash-{uuid.uuid4()}"))["result"]["task"]
    assert after["status"]["state"] == "TASK_STATE_COMPLETED"


def test_a_handler_that_lets_out_a_cancellation_of_its_own_fails_the_task_with_its_events_kept(rpc, stored):
    # Its execute() ends cancelled though the turn was not: an agent error like any other, and
    # what it emitted before is stored. It was a BaseException the turn did not catch: what
    # waited for its batch was dropped, and the task failed as "without reaching a final state".
    _agent("cancelled-inside", "cancelled-inside")
    params = user_message("go", f"cancelled-inside-{uuid.uuid4()}")
    task = rpc("SendMessage", params, agent="cancelled-inside")["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert "ended cancelled" in task["status"]["message"]["parts"][0]["text"]
    assert [artifact["name"] for artifact in task["artifacts"]] == ["draft"]
    after = rpc("SendMessage", user_message("still there?", f"after-cancelled-{uuid.uuid4()}"))["result"][
        "task"
    ]
    assert after["status"]["state"] == "TASK_STATE_COMPLETED"


def test_a_handler_that_stops_without_a_final_state_fails_the_task(rpc, stored):
    _agent("silent", "silent")
    task = rpc("SendMessage", user_message("hello?", f"silent-{uuid.uuid4()}"), agent="silent")["result"][
        "task"
    ]
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert "without reaching a final state" in task["status"]["message"]["parts"][0]["text"]


def test_an_unknown_handler_fails_the_task(rpc, stored):
    _agent("ghost", "no-such-handler")
    task = rpc("SendMessage", user_message("anyone?", f"ghost-{uuid.uuid4()}"), agent="ghost")["result"][
        "task"
    ]
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert "no-such-handler" in task["status"]["message"]["parts"][0]["text"]


def test_an_answer_that_comes_before_the_question_turn_closes_is_not_failed(rpc, stored):
    """A blocking client gets the question as soon as it is stored, before its turn closes.

    Its answer sets the task back to SUBMITTED; the question's turn closing late
    must leave the task to the answer's turn, not fail it as "unsettled".
    """
    from tasks_app.models import Message, Task
    from tasks_app.turns import turn_finish

    task = rpc("SendMessage", user_message("Plan the offsite", f"ask-{uuid.uuid4()}"), agent="clarify")
    task = task["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    question = Message.objects.get(task_id=task["id"], role=Message.Role.USER)
    # The answer as message_send stores it, its turn not yet dispatched.
    waiting = Task.objects.select_related("tenant", "context").get(pk=task["id"])
    answer = Message.objects.create(
        tenant=waiting.tenant,
        task=waiting,
        context=waiting.context,
        message_id=f"answer-{uuid.uuid4()}",
        role=Message.Role.USER,
        parts=[{"text": "Forty guests"}],
        turn=Message.Turn.PENDING,
        sender=waiting.owner,
    )
    Task.objects.filter(pk=waiting.pk).update(state="submitted")
    try:
        turn_finish(waiting.pk, question.pk, None)  # the question's turn closes late

        assert Task.objects.get(pk=waiting.pk).state == "submitted"
    finally:
        # The answer's turn was never dispatched, and no sweeper runs beside the suite's
        # server: closed here, or later tests wait for it (test_jsonrpc_errors.stored_counts).
        Message.objects.filter(pk=answer.pk).update(turn=Message.Turn.DONE)
