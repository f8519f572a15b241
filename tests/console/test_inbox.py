"""The operator inbox in a real browser: answer inline, grant after confirming, race, live.

Every test here fails on a browser console error or an uncaught exception
(the no_console_errors fixture).
"""

import re
import uuid

import httpx
import pytest
from a2a.types import TaskState
from playwright.sync_api import expect

from tasks_app.models import Message, Task
from tests.conftest import user_message
from tests.console.callers import StreamingCaller
from tests.console.conftest import orm, screenshot, wait_live

# A page whose live feed never connects: it shows the queue as it was when it loaded,
# as a page of someone on a slow network does, so its operator can act on a stale item.
FROZEN_FEED = """window.WebSocket = class {
    constructor() { this.readyState = 0; }
    send() {}
    close() {}
};"""


def _waiting(rpc, agent: str, text: str) -> str:
    """A task of acme's `agent` waiting for a person; returns its id."""
    task = rpc("SendMessage", user_message(text, f"msg-{uuid.uuid4()}"), agent=agent, tenant="acme")
    task = task["result"]["task"]
    assert task["status"]["state"] in ("TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"), task
    return task["id"]


def _item(page, task_id: str):
    return page.locator(f'#queue-rows > [data-key="{task_id}"]')


def _state(task_id: str) -> str:
    return Task.objects.get(pk=task_id).state


def test_an_operator_answers_from_the_queue_inline_and_the_next_item_is_focused(
    server, sign_in, acme_agent, rpc, no_console_errors
):
    slug = acme_agent("clarify", "clarify")
    first = _waiting(rpc, slug, f"Book the venue {uuid.uuid4().hex[:6]}")
    second = _waiting(rpc, slug, "Order the catering, in a request long enough " + "to need more room " * 12)
    bob = sign_in("bob")
    bob.goto("/console/t/acme/queues/input-required/")
    wait_live(bob)
    item = _item(bob, first)
    # The original request, the question, the caller and how long it waits, all in the item.
    expect(item.locator(".asked")).to_contain_text("Book the venue")
    expect(item.locator(".prompt")).to_contain_text("who is this for")
    expect(item.locator(".caller")).to_have_text("anonymous")
    expect(item.locator("time")).to_have_text(re.compile(r"^\d+ (s|min)$"))
    # Nothing is cut short: the long request is there in full.
    expect(_item(bob, second).locator(".asked")).to_contain_text(("to need more room " * 12).strip())
    assert "…" not in _item(bob, second).locator(".asked").inner_text()
    screenshot(bob, "inbox-input-required")

    # One keystroke to the oldest item's answer box (other tests may have left older ones
    # in acme's queue), each next one a keystroke further; Ctrl+Enter sends.
    bob.keyboard.press("j")
    expect(bob.locator("#queue-rows > .inbox-item").first.get_by_label("Your answer")).to_be_focused()
    keys = bob.locator("#queue-rows > .inbox-item").evaluate_all("items => items.map(i => i.dataset.key)")
    for _ in range(keys.index(first)):
        bob.keyboard.press("Escape")  # out of the answer box: j moves between items again
        bob.keyboard.press("j")
    expect(item.get_by_label("Your answer")).to_be_focused()
    bob.keyboard.type("For the board, forty guests")
    bob.keyboard.press("Control+Enter")
    expect(bob.locator(".flash")).to_contain_text("Answer sent")
    expect(_item(bob, first)).to_have_count(0)
    # Back on the queue, the oldest item still waiting is focused: answering it is one keystroke
    # away (`second`, unless other tests left older ones in acme's queue).
    waiting = bob.locator("#queue-rows > .inbox-item")
    expect(waiting.first.get_by_label("Your answer")).to_be_focused()
    if keys.index(first) == 0:
        expect(_item(bob, second).get_by_label("Your answer")).to_be_focused()

    # The task finishes with the answer; its page names bob, and the timeline reads in order.
    bob.goto(f"/console/t/acme/tasks/{first}/")
    expect(bob.get_by_test_id("task-state")).to_have_text("Completed")
    senders = bob.locator("#conversation").get_by_test_id("message-sender")
    expect(senders).to_contain_text(["anonymous", "bob"])
    expect(bob.locator("#conversation")).not_to_contain_text("user:")
    states = bob.locator("#timeline td.tl-state").all_inner_texts()
    shown = [state for state in states if state]
    assert shown[0] == "Submitted" and shown[-1] == "Completed", shown
    assert shown.count("Submitted") == 1, shown
    assert shown.index("Input required") < len(shown) - 1 - shown[::-1].index("Working"), shown
    expect(bob.locator("#timeline")).to_contain_text("Answered by bob")
    # The latest status is the final one, not the "working on it" of the turn before.
    expect(bob.get_by_test_id("status-message")).to_contain_text("Done: your request and your answer")
    screenshot(bob, "task-detail-answered-from-inbox")


@pytest.mark.parametrize(("decision", "final"), [("Grant", "completed"), ("Deny", "rejected")])
def test_a_decision_waits_for_its_confirmation(
    server, sign_in, acme_agent, rpc, no_console_errors, decision, final
):
    slug = acme_agent("approval", "approval")
    task_id = _waiting(rpc, slug, f"Deploy release {uuid.uuid4().hex[:6]}")
    bob = sign_in("bob")
    bob.goto("/console/t/acme/queues/auth-required/")
    wait_live(bob)
    item = _item(bob, task_id)
    expect(item.locator(".asked")).to_contain_text("Deploy release")
    expect(item.locator(".prompt")).to_contain_text("Approval needed")

    item.get_by_text(f"{decision}…", exact=True).click()
    confirm = item.get_by_role("button", name=f"Confirm {decision.lower()}")
    expect(confirm).to_be_visible()
    expect(confirm).to_be_focused()
    if decision == "Grant":
        screenshot(bob, "inbox-grant-confirmation")
    # The first click decided nothing.
    bob.wait_for_timeout(300)
    assert orm(_state, task_id) == "auth-required"
    confirm.click()
    expect(bob.locator(".flash")).to_contain_text(
        "Authorization granted" if decision == "Grant" else "denied"
    )
    expect(_item(bob, task_id)).to_have_count(0)
    bob.goto(f"/console/t/acme/tasks/{task_id}/")
    expect(bob.get_by_test_id("task-state")).to_have_text(final.capitalize())


def _bob_writes_while_dora_answers(sign_in, task_id: str, answer: str):
    """Bob's page, his answer written, and dora's page once her `answer` went in first.

    Bob's page never hears that dora answered: he answers an item that is already taken.
    """
    bob = sign_in("bob", init_script=FROZEN_FEED)
    bob.goto("/console/t/acme/queues/input-required/")
    _item(bob, task_id).get_by_label("Your answer").fill("Answer from bob")
    dora = sign_in("dora")
    dora.goto("/console/t/acme/queues/input-required/")
    _item(dora, task_id).get_by_label("Your answer").fill(answer)
    _item(dora, task_id).get_by_role("button", name="Send answer").click()
    expect(dora.locator(".flash")).to_contain_text("Answer sent")
    return bob, dora


def test_two_operators_race_and_the_second_learns_who_answered(
    server, sign_in, acme_agent, rpc, no_console_errors
):
    slug = acme_agent("clarify", "clarify")
    task_id = _waiting(rpc, slug, "Plan the offsite")
    bob, _ = _bob_writes_while_dora_answers(sign_in, task_id, "Answer from dora")

    _item(bob, task_id).get_by_role("button", name="Send answer").click()
    flash = bob.locator(".flash")
    expect(flash).to_contain_text("This task was already answered by dora")
    expect(flash).to_contain_text("Nothing was sent")
    screenshot(bob, "inbox-race-lost")
    texts = orm(
        lambda: [
            m.parts[0]["text"] for m in Message.objects.filter(task_id=task_id, role="user").order_by("pk")
        ]
    )
    assert texts == ["Plan the offsite", "Answer from dora"]


def test_an_answer_written_for_a_question_the_agent_has_since_replaced_is_not_sent(
    server, sign_in, acme_agent, rpc, no_console_errors
):
    # ask-then-gate asks "Which gate?" again after any answer that is not a path.
    slug = acme_agent("ask-again", "ask-then-gate")
    task_id = _waiting(rpc, slug, "Open a gate")
    bob, dora = _bob_writes_while_dora_answers(sign_in, task_id, "north")
    # The agent asks again (dora's answer left input-required at once): the task waits for another answer.
    for _ in range(300):
        if orm(_state, task_id) == "input-required":
            break
        dora.wait_for_timeout(100)
    else:
        raise AssertionError("the agent never asked again")

    _item(bob, task_id).get_by_role("button", name="Send answer").click()
    flash = bob.locator(".flash")
    expect(flash).to_contain_text("This task was already answered by dora")
    expect(flash).to_contain_text("Nothing was sent")
    texts = orm(
        lambda: [
            m.parts[0]["text"] for m in Message.objects.filter(task_id=task_id, role="user").order_by("pk")
        ]
    )
    assert texts == ["Open a gate", "north"]


def test_the_inbox_updates_live_without_losing_what_an_operator_types(
    server, sign_in, acme_agent, rpc, no_console_errors
):
    slug = acme_agent("clarify", "clarify")
    kept = _waiting(rpc, slug, "First in line")
    bob = sign_in("bob")
    bob.goto("/console/t/acme/queues/input-required/")
    wait_live(bob)
    bob.evaluate("window.__sameDocument = true")
    _item(bob, kept).get_by_label("Your answer").fill("half-written answer")
    count = int(bob.get_by_test_id("input-count").inner_text())

    # A new task arrives while bob types: it appears, and his text stays.
    arrived = _waiting(rpc, slug, "Arrived while typing")
    expect(_item(bob, arrived).locator(".asked")).to_contain_text("Arrived while typing")
    expect(bob.get_by_test_id("input-count")).to_have_text(str(count + 1))
    expect(_item(bob, kept).get_by_label("Your answer")).to_have_value("half-written answer")

    # Someone else answers the new one (here, its caller): it leaves bob's inbox by itself.
    task = orm(Task.objects.select_related("context").get, pk=arrived)
    answer = user_message("Answered by the caller", f"msg-{uuid.uuid4()}", taskId=arrived)
    answer["message"]["contextId"] = task.context.context_id
    assert "result" in rpc("SendMessage", answer, agent=slug, tenant="acme")
    expect(_item(bob, arrived)).to_have_count(0)
    expect(bob.get_by_test_id("input-count")).to_have_text(str(count))
    expect(_item(bob, kept).get_by_label("Your answer")).to_have_value("half-written answer")
    assert bob.evaluate("window.__sameDocument") is True


def test_a_draft_dialect_task_shows_its_own_id_and_is_found_by_it(
    server, sign_in, acme_agent, no_console_errors
):
    slug = acme_agent("echo", "echo")
    client_id = f"task-2024-0715-{uuid.uuid4().hex[:6]}"
    sent = httpx.post(
        server.agent_url(slug, "acme"),
        json={
            "jsonrpc": "2.0",
            "id": "req-001",
            "method": "tasks/send",
            "params": {
                "id": client_id,
                "message": {"role": "user", "parts": [{"type": "text", "text": "hola"}]},
            },
        },
        timeout=30,
    ).json()
    assert sent["result"]["id"] == client_id, sent
    alice = sign_in("alice")
    alice.goto("/console/t/acme/tasks/")
    alice.get_by_label("Text or task id").fill(client_id)
    alice.get_by_role("button", name="Filter").click()
    rows = alice.locator("#task-rows tr")
    expect(rows).to_have_count(1)
    expect(rows).to_contain_text(client_id)
    rows.get_by_role("link").first.click()
    expect(alice.get_by_test_id("client-task-id")).to_have_text(client_id)
    screenshot(alice, "task-detail-draft-client-id")


def test_a_caller_waiting_is_a_streaming_caller_too(server, sign_in, acme_agent, no_console_errors):
    """The a2a-sdk client's streamed task reaches the inbox, is answered there, and the stream sees it end."""
    slug = acme_agent("clarify", "clarify")
    bob = sign_in("bob")
    bob.goto("/console/t/acme/queues/input-required/")
    wait_live(bob)
    caller = StreamingCaller(server.agent_url(slug, "acme"), "Summarise the Q3 numbers").start()
    caller.wait(caller.interrupted)
    item = _item(bob, caller.task_id)
    expect(item.locator(".asked")).to_contain_text("Summarise the Q3 numbers")
    caller.wait(caller.subscribed)
    item.get_by_label("Your answer").fill("One page, for the board")
    item.get_by_role("button", name="Send answer").click()
    expect(bob.locator(".flash")).to_contain_text("Answer sent")
    caller.wait(caller.done)
    assert caller.final_state == TaskState.TASK_STATE_COMPLETED
    assert "Answer: One page, for the board" in "\n".join(caller.artifact_texts)
