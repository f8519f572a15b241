"""Task detail: what an agent wrote is shown as text (nothing from agent output or
artifact names runs), files download, and push delivery attempts are listed."""

import base64
import uuid

from playwright.sync_api import expect

from tasks_app.models import Artifact, PushConfig, PushDelivery, Task
from tests.conftest import user_message
from tests.console.conftest import orm, screenshot

SCRIPT = '<script>window.__pwned = 1; alert("from text")</script><img src=x onerror="alert(\'img\')">'
FILE_BODY = b"<script>alert('file')</script>"


def _add_hostile_artifact(task_id: str) -> None:
    Artifact.objects.create(
        task=Task.objects.get(pk=task_id),
        artifact_id="hostile",
        name="<img src=x onerror=\"alert('name')\">report",
        parts=[
            {"data": {"html": "<script>alert('data')</script>", "rows": [1, 2]}},
            {
                "raw": base64.b64encode(FILE_BODY).decode(),
                "filename": '<b onclick="alert(1)">evil</b>.html',
                "mediaType": "text/html",
            },
            {"url": "javascript:alert('url')"},
        ],
    )


def _add_push_attempts(task_id: str) -> None:
    task = Task.objects.get(pk=task_id)
    config = PushConfig.objects.create(
        tenant=task.tenant, task=task, config_id="hook-1", url="https://hooks.example.test/a2a"
    )
    event = task.events.order_by("seq").last()
    PushDelivery.objects.create(
        config=config,
        event=event,
        seq=event.seq,
        attempt=1,
        status="failed",
        response_code=502,
        error="<script>alert('push')</script> bad gateway",
    )
    PushDelivery.objects.create(
        config=config, event=event, seq=event.seq, attempt=2, status="succeeded", response_code=204
    )


def test_agent_output_with_script_renders_as_text(server, sign_in, acme_agent, rpc):
    slug = acme_agent("echo", "echo")
    result = rpc("SendMessage", user_message(SCRIPT, f"msg-{uuid.uuid4()}"), agent=slug, tenant="acme")
    task_id = result["result"]["task"]["id"]
    orm(_add_hostile_artifact, task_id)
    orm(_add_push_attempts, task_id)

    alice = sign_in("alice")
    dialogs = []
    alice.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    alice.goto(f"/console/t/acme/tasks/{task_id}/")
    artifacts = alice.locator("#artifacts")
    # The script is on screen as characters, in the echo artifact and in the conversation.
    expect(artifacts).to_contain_text('<script>window.__pwned = 1; alert("from text")</script>')
    expect(alice.locator("#conversation")).to_contain_text("<img src=x onerror=")
    expect(artifacts).to_contain_text("<img src=x onerror=\"alert('name')\">report")
    # Data parts as formatted JSON, still text.
    expect(artifacts.locator(".part-data pre")).to_contain_text('"html": "<script>alert(\'data\')</script>"')
    # A javascript: URL is shown, never linked.
    assert artifacts.locator("a[href^='javascript']").count() == 0
    expect(artifacts).to_contain_text("javascript:alert('url')")
    alice.wait_for_timeout(500)
    assert dialogs == []
    assert alice.evaluate("window.__pwned") is None
    assert alice.locator("#artifacts script, #conversation script, #artifacts img").count() == 0
    push = alice.locator("#push tbody tr")
    expect(push).to_have_count(2)
    expect(push.nth(0)).to_contain_text("Failed (retried)")
    expect(push.nth(0)).to_contain_text("502")
    expect(push.nth(0)).to_contain_text("<script>alert('push')</script> bad gateway")
    expect(push.nth(1)).to_contain_text("Succeeded")
    assert alice.locator("#push script").count() == 0
    screenshot(alice, "task-detail-escaped")

    # The file downloads with its bytes intact and a harmless name.
    with alice.expect_download() as download_info:
        alice.get_by_role("link", name='<b onclick="alert(1)">evil</b>.html').click()
    download = download_info.value
    assert download.suggested_filename == "_b_onclick_alert_1_evil_b_.html"
    with open(download.path(), "rb") as handle:
        assert handle.read() == FILE_BODY
    assert dialogs == []
