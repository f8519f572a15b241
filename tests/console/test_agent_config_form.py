"""The console's agent form: fields from the handler's schema, a raw JSON view, and the
handler's refusal shown next to the field (or the JSON) it is about.

Every page here fails the test on a browser console error (watch_console).
"""

import json
import uuid

from playwright.sync_api import expect

from agents.models import Agent
from tests.console.conftest import orm, screenshot

RANGE = '"duration" must be a number of seconds from 0 to 60, not 600.'
BOGUS = '"bogus" is not a setting of the Long-running job (streaming) handler; its settings are: "duration".'


def test_an_owner_registers_an_agent_from_the_schema_form(server, sign_in, watch_console):
    alice = watch_console(sign_in("alice"))
    suffix = uuid.uuid4().hex[:6]
    alice.goto("/console/t/acme/agents/new/")
    # It starts on echo, which says what it is and that it takes no settings.
    expect(alice.get_by_label("Handler")).to_have_value("echo")
    echo = alice.locator("[data-handler-section=echo]")
    expect(echo).to_be_visible()
    expect(echo).to_contain_text("Answers every message with the text it received")
    expect(echo).to_contain_text("This handler takes no settings.")
    expect(alice.locator("[data-handler-section=progress]")).to_be_hidden()
    expect(alice.get_by_label("Config (JSON)")).to_be_hidden()

    # The slug follows the name until it is typed into.
    alice.get_by_label("Name", exact=True).fill(f"Nightly Crunch {suffix}")
    slug = f"nightly-crunch-{suffix}"
    expect(alice.get_by_label("Slug")).to_have_value(slug)

    alice.get_by_label("Handler").select_option("progress")
    progress = alice.locator("[data-handler-section=progress]")
    expect(progress).to_be_visible()
    expect(echo).to_be_hidden()
    duration = alice.get_by_label("Duration (seconds)")
    expect(duration).to_have_attribute("max", "60.0")
    expect(progress).to_contain_text("Default: 3.")
    screenshot(alice, "agent-form-schema-fields")

    # Out of range: the schema's message, on the duration field itself; nothing is stored.
    duration.fill("600")
    alice.get_by_role("button", name="Register agent").click()
    duration_field = alice.locator(".field.has-error", has=alice.get_by_label("Duration (seconds)"))
    expect(duration_field.get_by_role("alert")).to_have_text(RANGE)
    expect(alice.locator(".field.has-error")).to_have_count(1)
    expect(alice.get_by_label("Duration (seconds)")).to_have_value("600")
    expect(alice.get_by_label("Handler")).to_have_value("progress")
    screenshot(alice, "agent-form-field-refused")
    assert not orm(lambda: Agent.objects.filter(tenant__slug="acme", slug=slug).exists())

    # The raw view carries the fields' values over; an unknown key is refused there.
    alice.get_by_label("Duration (seconds)").fill("0.5")
    alice.get_by_label("Raw JSON").check()
    raw = alice.get_by_label("Config (JSON)")
    expect(raw).to_be_visible()
    assert json.loads(raw.input_value()) == {"duration": 0.5}
    raw.fill('{"duration": 0.5, "bogus": 1}')
    alice.get_by_role("button", name="Register agent").click()
    raw_field = alice.locator(".field.has-error", has=alice.get_by_label("Config (JSON)"))
    expect(raw_field.get_by_role("alert")).to_have_text(BOGUS)
    expect(alice.get_by_label("Config (JSON)")).to_have_value('{"duration": 0.5, "bogus": 1}')
    screenshot(alice, "agent-form-raw-refused")
    assert not orm(lambda: Agent.objects.filter(tenant__slug="acme", slug=slug).exists())

    # Back to the fields: a key the form does not know keeps the raw view, saying why.
    alice.get_by_label("Form fields").click()
    expect(alice.get_by_role("alert").filter(has_text="keys the form does not know (bogus)")).to_be_visible()
    expect(alice.get_by_label("Raw JSON")).to_be_checked()
    alice.get_by_label("Config (JSON)").fill('{"duration": 2}')
    alice.get_by_label("Form fields").check()
    expect(alice.get_by_label("Duration (seconds)")).to_have_value("2")
    alice.get_by_role("button", name="Register agent").click()
    expect(alice.locator(".flash")).to_contain_text("is registered")
    expect(alice.get_by_test_id("agent-status")).to_contain_text("Serving calls")
    stored = orm(lambda: Agent.objects.get(tenant__slug="acme", slug=slug))
    assert (stored.handler, stored.config, stored.name) == (
        "progress",
        {"duration": 2},
        f"Nightly Crunch {suffix}",
    )
    # No skills given: the card has the handler's own.
    expect(alice.get_by_test_id("card-preview")).to_contain_text('"name": "Long-running job"')

    # Editing starts on the fields, filled with the stored config, and is checked the same way.
    alice.get_by_role("link", name="Edit").click()
    expect(alice.get_by_label("Duration (seconds)")).to_have_value("2")
    expect(alice.get_by_label("Slug")).to_be_disabled()
    alice.get_by_label("Duration (seconds)").fill("600")
    alice.get_by_role("button", name="Save").click()
    expect(duration_field.get_by_role("alert")).to_have_text(RANGE)
    assert orm(lambda: Agent.objects.get(tenant__slug="acme", slug=slug).config) == {"duration": 2}
    alice.get_by_label("Duration (seconds)").fill("")
    alice.get_by_role("button", name="Save").click()
    expect(alice.locator(".flash")).to_contain_text("Agent saved")
    # An empty field leaves the key out: the handler's default applies.
    assert orm(lambda: Agent.objects.get(tenant__slug="acme", slug=slug).config) == {}


def test_a_proxy_is_registered_from_its_fields_headers_included(server, sign_in, watch_console):
    alice = watch_console(sign_in("alice"))
    slug = f"proxy-form-{uuid.uuid4().hex[:6]}"
    alice.goto("/console/t/acme/agents/new/")
    alice.get_by_label("Name", exact=True).fill("Proxy from fields")
    alice.get_by_label("Slug").fill(slug)
    alice.get_by_label("Handler").select_option("a2a_proxy")
    proxy = alice.locator("[data-handler-section=a2a_proxy]")
    expect(proxy).to_contain_text("Hosts a remote A2A agent behind the platform")
    # Required and left empty: the schema says what it needs.
    alice.get_by_role("button", name="Register agent").click()
    url_field = alice.locator(".field.has-error", has=alice.get_by_label("URL", exact=True))
    expect(url_field.get_by_role("alert")).to_contain_text('"url" is required')
    alice.get_by_label("URL", exact=True).fill(server.agent_url("echo"))
    alice.get_by_label("Headers").fill("X-Trace: on\nbroken line")
    alice.get_by_role("button", name="Register agent").click()
    headers_field = alice.locator(".field.has-error", has=alice.get_by_label("Headers"))
    expect(headers_field.get_by_role("alert")).to_contain_text("Write one 'Name: value' per line")
    alice.get_by_label("Headers").fill("X-Trace: on")
    alice.get_by_label("Timeout (seconds)").fill("30")
    alice.get_by_role("button", name="Register agent").click()
    expect(alice.locator(".flash")).to_contain_text("is registered")
    expect(alice.get_by_test_id("agent-status")).to_contain_text("Serving calls")
    assert orm(lambda: Agent.objects.get(tenant__slug="acme", slug=slug).config) == {
        "url": server.agent_url("echo"),
        "headers": {"X-Trace": "on"},
        "timeout": 30,
    }


def test_an_owner_sets_the_turn_time_limit_in_the_console(server, sign_in, watch_console):
    alice = watch_console(sign_in("alice"))
    slug = f"limited-{uuid.uuid4().hex[:6]}"
    alice.goto("/console/t/acme/agents/new/")
    alice.get_by_label("Name", exact=True).fill("Limited")
    alice.get_by_label("Slug").fill(slug)
    alice.get_by_role("button", name="Register agent").click()
    expect(alice.locator(".flash")).to_contain_text("is registered")
    stored = orm(lambda: Agent.objects.get(tenant__slug="acme", slug=slug))
    # Left empty, the limit is the default; the handler is the one the form starts on.
    assert (stored.turn_timeout, stored.handler) == (600, "echo")

    alice.get_by_role("link", name="Edit").click()
    alice.get_by_label("Turn timeout").fill("0")
    alice.get_by_role("button", name="Save").click()
    limit_field = alice.locator(".field.has-error", has=alice.get_by_label("Turn timeout"))
    expect(limit_field.get_by_role("alert")).to_contain_text("greater than or equal to 1")
    alice.get_by_label("Turn timeout").fill("45")
    alice.get_by_role("button", name="Save").click()
    expect(alice.locator(".flash")).to_be_visible()
    assert orm(lambda: Agent.objects.get(tenant__slug="acme", slug=slug).turn_timeout) == 45
