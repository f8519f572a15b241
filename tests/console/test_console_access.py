"""Roles and tenants in the console: viewers only look, other tenants see nothing."""

import uuid

import pytest
from playwright.sync_api import expect

from tasks_app.models import Message, Task
from tests.conftest import user_message
from tests.console.conftest import orm


def _waiting_task(rpc, agent: str) -> str:
    result = rpc(
        "SendMessage", user_message("Plan the offsite", f"msg-{uuid.uuid4()}"), agent=agent, tenant="acme"
    )
    task = result["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    return task["id"]


def _user_messages(task_id: str) -> int:
    return Message.objects.filter(task_id=task_id, role=Message.Role.USER).count()


def _csrf(page) -> str:
    return next(cookie["value"] for cookie in page.context.cookies() if cookie["name"] == "csrftoken")


def test_signed_out_visitors_are_sent_to_sign_in(server, browser):
    context = browser.new_context(base_url=server.base_url)
    page = context.new_page()
    page.goto("/console/t/acme/tasks/")
    assert "/console/login/?next=/console/t/acme/tasks/" in page.url
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    context.close()


def test_a_viewer_cannot_answer_or_cancel(server, sign_in, acme_agent, rpc):
    task_id = _waiting_task(rpc, acme_agent("clarify", "clarify"))
    dave = sign_in("dave")
    detail = f"/console/t/acme/tasks/{task_id}/"
    dave.goto(detail)
    expect(dave.get_by_test_id("task-state")).to_have_text("Input required")
    expect(dave.get_by_text("You have read-only access")).to_be_visible()
    assert dave.get_by_role("button", name="Send answer").count() == 0
    assert dave.get_by_role("button", name="Cancel task").count() == 0
    assert dave.get_by_label("Your answer").count() == 0

    # A hand-made POST with a valid CSRF token is refused all the same.
    for action, form in [
        ("answer", {"text": "sneaky"}),
        ("cancel", {}),
        ("authorize", {"decision": "grant"}),
    ]:
        response = dave.request.post(
            f"{detail}{action}",
            form={**form, "csrfmiddlewaretoken": _csrf(dave)},
            headers={"X-CSRFToken": _csrf(dave)},
        )
        assert response.status == 403, action
    assert orm(lambda: Task.objects.get(pk=task_id).state) == "input-required"
    assert orm(_user_messages, task_id) == 1


def test_a_post_without_csrf_token_is_refused(server, sign_in, acme_agent, rpc):
    task_id = _waiting_task(rpc, acme_agent("clarify", "clarify"))
    bob = sign_in("bob")
    response = bob.request.post(f"/console/t/acme/tasks/{task_id}/answer", form={"text": "no token"})
    assert response.status == 403
    assert orm(_user_messages, task_id) == 1


def test_an_operator_of_another_tenant_sees_nothing(server, sign_in, acme_agent, rpc):
    task_id = _waiting_task(rpc, acme_agent("clarify", "clarify"))
    erin = sign_in("erin")
    assert "/console/t/globex/" in erin.url
    # The same answer as for a task that does not exist.
    assert erin.goto(f"/console/t/acme/tasks/{task_id}/").status == 404
    assert erin.goto(f"/console/t/acme/tasks/{uuid.uuid4()}/").status == 404
    assert erin.goto("/console/t/acme/").status == 404
    assert erin.goto("/console/t/acme/queues/input-required/").status == 404
    assert erin.goto(f"/console/t/globex/tasks/{task_id}/").status == 404
    for path in ("/console/t/globex/tasks/", "/console/t/globex/queues/input-required/"):
        erin.goto(path)
        assert erin.locator(f'[data-key="{task_id}"]').count() == 0
        expect(erin.locator("main")).not_to_contain_text("Plan the offsite")
    erin.goto("/console/t/globex/queues/input-required/")
    expect(erin.locator("#queue-rows")).to_contain_text("Nothing is waiting")
    # The tenant switcher offers only her own tenant.
    expect(erin.locator(".switcher li")).to_have_count(1)
    # A forged answer to acme's task finds nothing either.
    response = erin.request.post(
        f"/console/t/acme/tasks/{task_id}/answer",
        form={"text": "hi", "csrfmiddlewaretoken": _csrf(erin)},
        headers={"X-CSRFToken": _csrf(erin)},
    )
    assert response.status == 404
    # And acme's live feed does not open for her.
    opened = erin.evaluate(
        """url => new Promise(resolve => {
            const socket = new WebSocket(url);
            socket.onopen = () => { socket.close(); resolve(true); };
            socket.onclose = () => resolve(false);
        })""",
        server.base_url.replace("http", "ws") + "/console/t/acme/feed/",
    )
    assert opened is False
    assert orm(_user_messages, task_id) == 1


def test_two_operators_answer_the_same_prompt_and_only_one_answer_counts(server, sign_in, acme_agent, rpc):
    task_id = _waiting_task(rpc, acme_agent("clarify", "clarify"))
    pages = {"bob": sign_in("bob"), "dora": sign_in("dora")}
    for name, page in pages.items():
        page.goto(f"/console/t/acme/tasks/{task_id}/")
        page.get_by_label("Your answer").fill(f"Answer from {name}")
    # Both press "Send answer" at (nearly) the same moment.
    for page in pages.values():
        page.evaluate("document.querySelector('form.answer').requestSubmit()")
    flashes = {}
    for name, page in pages.items():
        # The page is already at the task's URL, so wait for the answer's flash itself;
        # on a loaded machine the second POST waits for the first one's row lock.
        expect(page.locator(".flash")).to_be_visible(timeout=45_000)
        flashes[name] = page.locator(".flash").inner_text()
    winners = [name for name, text in flashes.items() if "Answer sent" in text]
    losers = [name for name, text in flashes.items() if "already answered" in text]
    assert len(winners) == 1 and len(losers) == 1, flashes
    expect(pages[losers[0]].locator(".flash")).to_contain_text("Nothing was sent")
    # The loser learns who answered, by username.
    expect(pages[losers[0]].locator(".flash")).to_contain_text(f"already answered by {winners[0]}")

    # The task finishes with the winner's answer, and it received exactly one.
    expect(pages[winners[0]].get_by_test_id("task-state")).to_have_text("Completed", timeout=30_000)
    assert orm(_user_messages, task_id) == 2
    texts = orm(
        lambda: [
            m.parts[0]["text"] for m in Message.objects.filter(task_id=task_id, role="user").order_by("pk")
        ]
    )
    assert texts == ["Plan the offsite", f"Answer from {winners[0]}"]


def test_a_live_refresh_does_not_swallow_the_flash_of_the_page_being_loaded(server, sign_in, acme_agent, rpc):
    """The answer's events reach the open page's feed, which refetches the page while the
    browser is still following the POST's redirect: that refetch must leave the flash."""
    task_id = _waiting_task(rpc, acme_agent("clarify", "clarify"))
    bob = sign_in("bob")
    bob.goto(f"/console/t/acme/tasks/{task_id}/")
    url = f"{server.base_url}/console/t/acme/tasks/{task_id}/"
    posted = bob.request.post(
        url + "answer",
        form={"text": "Forty guests"},
        headers={"X-CSRFToken": _csrf(bob), "Referer": url},
        max_redirects=0,
    )
    assert posted.status == 302, posted.text()
    live = bob.request.get(url, headers={"X-Console-Live": "1"})
    assert live.status == 200 and 'class="flash"' not in live.text()
    shown = bob.request.get(url)
    assert 'class="flash"' in shown.text() and "Answer sent" in shown.text()


def test_json_nested_too_deep_in_a_console_form_is_a_form_error_not_a_500():
    from django import forms

    from a2a_platform.console.forms import _parse_json

    with pytest.raises(forms.ValidationError, match="nested too deeply"):
        _parse_json("[" * 5000, "Config")


def _answer(username: str, method: str, url: str, data: dict | None = None):
    """One console request made in-process, signed in as `username` (CSRF not enforced)."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    def request():
        browser = Client()
        browser.force_login(get_user_model().objects.get(username=username))
        return getattr(browser, method)(url, data or {})

    return orm(request)


def _as(username: str, method: str, url: str, data: dict | None = None) -> int:
    return _answer(username, method, url, data).status_code


def test_an_agents_secrets_are_on_its_page_only_for_its_owners(people):
    from agents.models import Agent
    from tenants.models import Tenant

    slug = f"keyed-{uuid.uuid4().hex[:6]}"
    orm(
        lambda: Agent.objects.create(
            tenant=Tenant.objects.get(slug="acme"),
            slug=slug,
            name="Keyed",
            handler="a2a_proxy",
            config={"url": "https://agents.example.com/a2a", "headers": {"X-Api-Key": "REMOTE-KEY"}},
        )
    )
    for username, sees in (("alice", True), ("bob", False), ("dave", False)):
        page = _answer(username, "get", f"/console/t/acme/agents/{slug}/")
        assert page.status_code == 200
        assert ("REMOTE-KEY" in page.content.decode()) is sees, username


@pytest.mark.parametrize(
    "method,path,data",
    [
        ("get", "tasks/", {"q": "a\x00b"}),
        ("get", "tasks/", {"context": "\x00"}),
        ("get", "tasks/00000000-0000-0000-0000-000000000000/file", {"artifact": "a\x00"}),
        ("post", "clients/a\x00b/revoke", {}),
        ("post", "tasks/00000000-0000-0000-0000-000000000000/answer", {"text": "yes\x00"}),
    ],
)
def test_a_nul_character_anywhere_in_a_console_request_is_a_400(people, method, path, data):
    # PostgreSQL stores no NUL: left to the database, each of these was a 500 there.
    assert _as("alice", method, f"/console/t/acme/{path}", data) == 400


@pytest.mark.parametrize("part", ["²", "1" * 5000, "-1", "x"])
def test_a_file_part_that_is_no_small_number_is_not_found(people, part):
    url = "/console/t/acme/tasks/00000000-0000-0000-0000-000000000000/file"
    assert _as("dave", "get", url, {"message": "m1", "part": part}) == 404
