"""Browser fixtures for the console: Debian's Chromium driven by Playwright, and the people.

The tenant trio, as tests/api has it: acme with owner alice, operator bob and
viewer dave; globex with owner charlie. The console adds a second acme operator
(dora) and a globex operator (erin).
Playwright's sync API runs only in plain (sync) tests; the a2a-sdk client runs
in a thread of its own with its own event loop (see tests/console/callers.py).
"""

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from agents.models import Agent
from tenants.models import Membership, Tenant
from tests.live import ROOT

# The same password as the API tests' trio: both suites make these users, whichever runs first.
PASSWORD = "correct horse battery staple"
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DEFAULT_LANDING = "**/console/t/**"
PEOPLE = {
    "alice": ("acme", Membership.Role.OWNER),
    "bob": ("acme", Membership.Role.OPERATOR),
    "dora": ("acme", Membership.Role.OPERATOR),
    "dave": ("acme", Membership.Role.VIEWER),
    "charlie": ("globex", Membership.Role.OWNER),
    "erin": ("globex", Membership.Role.OPERATOR),
}


_orm_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="console-orm")


def orm(function, *args, **kwargs):
    """Run ORM code off the main thread.

    Playwright's sync API keeps an event loop running on the main thread, and
    Django refuses database calls from a thread with a running loop.
    """
    return _orm_thread.submit(function, *args, **kwargs).result()


@pytest.fixture(scope="session")
def people(stored):
    """The tenants and their members; returns {username: User}."""
    return orm(_make_people)


def _make_people() -> dict:
    users = {}
    for username, (slug, role) in PEOPLE.items():
        tenant, _ = Tenant.objects.get_or_create(slug=slug, defaults={"name": slug.title()})
        user, _ = get_user_model().objects.get_or_create(username=username)
        # Always: another suite may have made the same username without a password.
        user.set_password(PASSWORD)
        user.save()
        Membership.objects.update_or_create(user=user, tenant=tenant, defaults={"role": role})
        users[username] = user
    return users


@pytest.fixture(scope="session")
def acme_agent(people):
    """Make a public agent of acme with a registry handler; returns its slug."""

    def make(slug: str, handler: str) -> str:
        orm(
            lambda: Agent.objects.update_or_create(
                tenant=Tenant.objects.get(slug="acme"),
                slug=slug,
                defaults={"name": slug.capitalize(), "handler": handler, "enabled": True},
            )
        )
        return slug

    return make


# Package scope: Playwright's sync API keeps a loop running on the main thread,
# which would make every later (non-console) test's ORM call fail.
@pytest.fixture(scope="package")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


class BrowserErrors:
    """What the pages of one test printed as console errors or threw as uncaught exceptions."""

    def __init__(self):
        self.strict = False
        self.seen: list[str] = []

    def watch(self, page) -> None:
        page.on("console", lambda message: self._console(page, message))
        page.on("pageerror", lambda error: self.seen.append(f"{page.url}: uncaught {error}"))

    def _console(self, page, message) -> None:
        if message.type == "error":
            where = message.location.get("url", "") if message.location else ""
            self.seen.append(f"{page.url}: console error {message.text} ({where})")


@pytest.fixture
def browser_errors():
    return BrowserErrors()


@pytest.fixture
def no_console_errors(browser_errors):
    """Fail the test if any page it opened logged a console error or threw (404s of assets too)."""
    browser_errors.strict = True
    yield browser_errors
    assert browser_errors.seen == [], "the browser reported errors:\n" + "\n".join(browser_errors.seen)


@pytest.fixture
def sign_in(browser, server, people, browser_errors):
    """sign_in("bob") -> a Playwright page of a fresh browser context, signed in as bob.

    width=390 opens it at a phone's width; every page is watched for console errors
    (asserted by the no_console_errors fixture).
    """
    contexts = []

    def open_as(username: str, lands_on: str = DEFAULT_LANDING, width: int = 1280, init_script: str = ""):
        viewport = {"width": width, "height": 900 if width > 600 else 844}
        context = browser.new_context(base_url=server.base_url, viewport=viewport)
        context.set_default_timeout(15_000)
        if init_script:
            context.add_init_script(init_script)
        contexts.append(context)
        page = context.new_page()
        browser_errors.watch(page)
        page.goto("/console/")
        page.get_by_label("Username").fill(username)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        if username in PEOPLE and lands_on == DEFAULT_LANDING:
            # Other suites may have made the same user a member of more tenants, which
            # lands on the tenant picker: go to the person's own tenant either way.
            page.wait_for_url(lambda url: "/console/login" not in url)
            home = f"/console/t/{PEOPLE[username][0]}/"
            if home not in page.url:
                page.goto(home)
        page.wait_for_url(lands_on)
        return page

    yield open_as
    for context in contexts:
        context.close()


def wait_live(page) -> None:
    """Wait until the page's live feed is connected."""
    page.wait_for_selector("body[data-live-state=open]")


def screenshot(page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


@pytest.fixture
def watch_console():
    """watch_console(page): collect the page's console errors and uncaught exceptions; the test
    fails at teardown if there were any."""
    seen: list[str] = []

    def watch(page):
        page.on("console", lambda message: message.type == "error" and seen.append(message.text))
        page.on("pageerror", lambda error: seen.append(f"uncaught: {error}"))
        return page

    yield watch
    assert seen == [], f"browser console errors: {seen}"
