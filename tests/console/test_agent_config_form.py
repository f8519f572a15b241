"""The console's agent form checks the config against the handler and says what is wrong next to it."""

import uuid

from playwright.sync_api import expect

from agents.models import Agent
from tests.console.conftest import orm, screenshot

MESSAGE = '"duration" must be a number of seconds from 0 to 60, not "abc".'


def test_a_bad_progress_config_is_shown_next_to_the_field_and_registers_nothing(server, sign_in):
    alice = sign_in("alice")
    slug = f"progress-{uuid.uuid4().hex[:6]}"
    before = orm(lambda: Agent.objects.filter(tenant__slug="acme").count())
    alice.goto("/console/t/acme/agents/new/")
    alice.get_by_label("Name", exact=True).fill("Cruncher")
    alice.get_by_label("Slug").fill(slug)
    alice.get_by_label("Handler").select_option("progress")
    alice.get_by_label("Config").fill('{"duration": "abc"}')
    alice.get_by_role("button", name="Register agent").click()

    # The message sits in the config field's own block, as its error.
    config_field = alice.locator(".field.has-error", has=alice.get_by_label("Config"))
    expect(config_field.get_by_role("alert")).to_have_text(MESSAGE)
    expect(alice.locator(".field.has-error")).to_have_count(1)
    # What was typed is still there to fix.
    expect(alice.get_by_label("Config")).to_have_value('{"duration": "abc"}')
    screenshot(alice, "agent-config-refused")
    assert orm(lambda: Agent.objects.filter(tenant__slug="acme").count()) == before
    assert not orm(lambda: Agent.objects.filter(tenant__slug="acme", slug=slug).exists())

    alice.get_by_label("Config").fill('{"duration": 0.5}')
    alice.get_by_role("button", name="Register agent").click()
    expect(alice.locator(".flash")).to_contain_text("is registered")
    assert orm(lambda: Agent.objects.get(tenant__slug="acme", slug=slug).config) == {"duration": 0.5}

    # Editing is checked the same way, and a refusal keeps the stored config.
    alice.get_by_role("link", name="Edit").click()
    alice.get_by_label("Config").fill('{"duration": 600}')
    alice.get_by_role("button", name="Save").click()
    expect(config_field.get_by_role("alert")).to_contain_text('"duration" must be a number of seconds')
    assert orm(lambda: Agent.objects.get(tenant__slug="acme", slug=slug).config) == {"duration": 0.5}


def test_an_owner_sets_the_turn_time_limit_in_the_console(server, sign_in):
    alice = sign_in("alice")
    slug = f"limited-{uuid.uuid4().hex[:6]}"
    alice.goto("/console/t/acme/agents/new/")
    alice.get_by_label("Name", exact=True).fill("Limited")
    alice.get_by_label("Slug").fill(slug)
    alice.get_by_label("Handler").select_option("echo")
    alice.get_by_role("button", name="Register agent").click()
    expect(alice.locator(".flash")).to_contain_text("is registered")
    # Left empty, the limit is the default.
    assert orm(lambda: Agent.objects.get(tenant__slug="acme", slug=slug).turn_timeout) == 600

    alice.get_by_role("link", name="Edit").click()
    alice.get_by_label("Turn timeout").fill("0")
    alice.get_by_role("button", name="Save").click()
    limit_field = alice.locator(".field.has-error", has=alice.get_by_label("Turn timeout"))
    expect(limit_field.get_by_role("alert")).to_contain_text("greater than or equal to 1")
    alice.get_by_label("Turn timeout").fill("45")
    alice.get_by_role("button", name="Save").click()
    expect(alice.locator(".flash")).to_be_visible()
    assert orm(lambda: Agent.objects.get(tenant__slug="acme", slug=slug).turn_timeout) == 45
