"""An agent's config is checked against its handler wherever an agent is created or changed.

The management API (POST and PATCH), the `agent create` command and the Django
admin all answer a config the handler cannot run with by naming what is wrong,
and store nothing. The console form is in tests/console/test_agent_config_form.py.
"""

import re
import uuid

import httpx
import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.test import override_settings

from agents.models import Agent
from agents.registry import ConfigInvalid, HandlerNotAvailable, validate_handler_config
from tenants.models import AuditEvent, Tenant
from tests.api import tenancy
from tests.api.test_api_isolation import call

trio = tenancy.trio

URL_HELP = (
    "The remote agent's JSON-RPC URL. Its card is read from "
    "<url>/.well-known/agent-card.json unless a card URL is given."
)
PROGRESS_BOGUS = (
    '"bogus" is not a setting of the Long-running job (streaming) handler; its settings are: "duration".'
)
BAD_CONFIGS = [
    ("progress", {"duration": "abc"}, '"duration" must be a number of seconds from 0 to 60, not "abc".'),
    ("progress", {"duration": 3600}, '"duration" must be a number of seconds from 0 to 60, not 3600.'),
    ("progress", {"duration": True}, '"duration" must be a number of seconds from 0 to 60, not true.'),
    ("a2a_proxy", {"url": 5}, '"url" must be an http(s) URL, not 5.'),
    ("a2a_proxy", {}, '"url" is required: ' + URL_HELP),
    ("progress", {"duration": 3, "bogus": 1}, PROGRESS_BOGUS),
    ("echo", {"anything": "goes"}, 'The Echo handler takes no settings: remove "anything".'),
    (
        "a2a_proxy",
        {"url": "ftp://example.com/agent/"},
        '"url" in the config must be an http(s) URL of a remote A2A agent.',
    ),
    (
        "a2a_proxy",
        {"url": "http://127.0.0.1:9/a2a/acme/lobby/", "timeout": "soon"},
        '"timeout" must be a number of seconds from 1 to 900, not "soon".',
    ),
    (
        "a2a_proxy",
        {"url": "http://127.0.0.1:9/a2a/acme/lobby/", "headers": {"X-Key": 42}},
        '"headers" must be an object of names to strings, not {"X-Key": 42}.',
    ),
]


def new_slug(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def acme_agents() -> int:
    return Agent.objects.filter(tenant__slug="acme").count()


def audit_events(slug: str) -> list[str]:
    return list(
        AuditEvent.objects.filter(tenant__slug="acme", target_type="agent", target_id=slug)
        .order_by("created_at")
        .values_list("action", flat=True)
    )


@pytest.mark.parametrize(("handler", "config", "message"), BAD_CONFIGS)
def test_registering_with_a_config_the_handler_cannot_run_is_refused_on_the_config_field(
    trio, handler, config, message
):
    alice = trio.token("acme", user="alice")
    slug = new_slug("bad-config")
    before = acme_agents()
    answer = call(
        trio, "POST", "acme", "agents/", alice, {"slug": slug, "handler": handler, "config": config}
    )
    assert answer.status_code == 400, answer.text
    assert answer.json() == {"config": [message]}
    assert acme_agents() == before
    assert not Agent.objects.filter(tenant__slug="acme", slug=slug).exists()
    assert audit_events(slug) == []


def test_good_configs_are_stored_as_sent(trio):
    alice = trio.token("acme", user="alice")
    remote = f"{trio.base_url}/a2a/acme/lobby/"
    good = [
        ("progress", {"duration": 0.5}),
        ("progress", {}),
        ("echo", {}),
        ("a2a_proxy", {"url": remote, "timeout": 30, "headers": {"X-Trace": "on"}}),
        # A handler with no config_model (from A2A_EXTRA_HANDLERS) takes any JSON object.
        ("silent", {"whatever": [1, "two", None]}),
    ]
    for handler, config in good:
        slug = new_slug("good-config")
        answer = call(
            trio, "POST", "acme", "agents/", alice, {"slug": slug, "handler": handler, "config": config}
        )
        assert answer.status_code == 201, (handler, answer.text)
        assert answer.json()["config"] == config
        assert Agent.objects.get(tenant__slug="acme", slug=slug).config == config
        assert audit_events(slug) == ["agent.create"]


def test_changing_the_config_or_handler_is_checked_and_a_refusal_changes_nothing(trio):
    alice = trio.token("acme", user="alice")
    slug = new_slug("patch-config")
    created = call(
        trio,
        "POST",
        "acme",
        "agents/",
        alice,
        {"slug": slug, "handler": "progress", "config": {"duration": 1}},
    )
    assert created.status_code == 201, created.text

    refused = call(trio, "PATCH", "acme", f"agents/{slug}/", alice, {"config": {"duration": -1}})
    assert refused.status_code == 400, refused.text
    assert refused.json() == {"config": ['"duration" must be a number of seconds from 0 to 60, not -1.']}
    # Another field in the same request is not stored either.
    refused = call(
        trio, "PATCH", "acme", f"agents/{slug}/", alice, {"name": "Renamed", "config": {"duration": "x"}}
    )
    assert refused.status_code == 400
    # A new handler is checked against the config the agent keeps.
    refused = call(trio, "PATCH", "acme", f"agents/{slug}/", alice, {"handler": "a2a_proxy"})
    assert refused.status_code == 400
    # Every key at fault is named: the missing url, and the progress setting the proxy does not take.
    assert refused.json() == {
        "config": [
            '"url" is required: ' + URL_HELP + ' "duration" is not a setting of the A2A proxy handler; '
            'its settings are: "url", "card_url", "headers", "timeout".'
        ]
    }
    stored = Agent.objects.get(tenant__slug="acme", slug=slug)
    assert (stored.handler, stored.name, stored.config) == ("progress", slug, {"duration": 1})
    assert audit_events(slug) == ["agent.create"]

    changed = call(trio, "PATCH", "acme", f"agents/{slug}/", alice, {"config": {"duration": 2.5}})
    assert changed.status_code == 200, changed.text
    assert changed.json()["config"] == {"duration": 2.5}
    remote = f"{trio.base_url}/a2a/acme/lobby/"
    moved = call(
        trio, "PATCH", "acme", f"agents/{slug}/", alice, {"handler": "a2a_proxy", "config": {"url": remote}}
    )
    assert moved.status_code == 200, moved.text
    assert audit_events(slug) == ["agent.create", "agent.update", "agent.update"]


def test_an_agent_stored_before_the_rules_can_still_be_renamed_and_disabled(trio):
    """Only a new or changed config is judged: an old row is not locked by it."""
    alice = trio.token("acme", user="alice")
    slug = new_slug("legacy-config")
    Agent.objects.create(
        tenant=Tenant.objects.get(slug="acme"),
        slug=slug,
        name=slug,
        handler="progress",
        config={"duration": "x"},
    )
    assert call(trio, "PATCH", "acme", f"agents/{slug}/", alice, {"name": "Old one"}).status_code == 200
    assert call(trio, "POST", "acme", f"agents/{slug}/disable/", alice).json()["enabled"] is False
    same = call(trio, "PATCH", "acme", f"agents/{slug}/", alice, {"config": {"duration": "x"}})
    assert same.status_code == 200
    fixed = call(trio, "PATCH", "acme", f"agents/{slug}/", alice, {"config": {"duration": "y"}})
    assert fixed.status_code == 400 and "duration" in fixed.json()["config"][0]


def test_an_unknown_handler_is_refused_with_the_names_there_are(trio):
    alice = trio.token("acme", user="alice")
    slug = new_slug("no-handler")
    answer = call(trio, "POST", "acme", "agents/", alice, {"slug": slug, "handler": "os.system"})
    assert answer.status_code == 400
    assert "handler must be one of:" in answer.text and "progress" in answer.text
    assert audit_events(slug) == []


def test_a_proxy_url_on_the_platforms_own_network_is_refused_unless_private_networks_are_allowed(stored):
    """The test servers allow private networks (tests/live.py): the refusal is checked here, in-process."""
    with override_settings(PROXY_ALLOW_PRIVATE_NETWORKS=False):
        for url in ("http://127.0.0.1:8000/a2a/demo/echo/", "http://localhost/", "http://10.0.0.8/"):
            with pytest.raises(
                ConfigInvalid, match=r'^"url" in the config is refused: the host .* resolves to'
            ) as refused:
                validate_handler_config("a2a_proxy", {"url": url})
            # The refusal names the switch that would allow it, not push notifications.
            assert "unless PROXY_ALLOW_PRIVATE_NETWORKS=true is set" in str(refused.value)
            assert "push" not in str(refused.value)
        with pytest.raises(ConfigInvalid, match="metadata|link-local|reserved"):
            validate_handler_config("a2a_proxy", {"url": "http://169.254.169.254/latest/"})
        # The model check, which the API, console, command and admin all go through, says the same.
        agent = Agent(tenant=Tenant.objects.get(slug="demo"), slug="p", name="p", handler="a2a_proxy")
        agent.config = {"url": "http://127.0.0.1:8000/a2a/demo/echo/"}
        with pytest.raises(ValidationError) as refused:
            agent.full_clean(validate_unique=False, validate_constraints=False)
        assert list(refused.value.message_dict) == ["config"]
        assert "loopback" in refused.value.message_dict["config"][0]
    with override_settings(PROXY_ALLOW_PRIVATE_NETWORKS=True):
        validate_handler_config("a2a_proxy", {"url": "http://127.0.0.1:8000/a2a/demo/echo/"})
    # In debug mode (the embedded default) loopback is allowed, for the local demo; private is not.
    with override_settings(DEBUG=True, PROXY_ALLOW_PRIVATE_NETWORKS=False):
        validate_handler_config("a2a_proxy", {"url": "http://127.0.0.1:8000/a2a/demo/echo/"})
        with pytest.raises(ConfigInvalid, match="a private address.*PROXY_ALLOW_PRIVATE_NETWORKS"):
            validate_handler_config("a2a_proxy", {"url": "http://10.0.0.8/"})


def test_validate_handler_config_on_its_own():
    validate_handler_config("echo", {})
    validate_handler_config("progress", {"duration": 60})
    with pytest.raises(ConfigInvalid, match='remove "anything"') as refused:
        validate_handler_config("echo", {"anything": "goes"})
    assert refused.value.key == "anything"
    for config in ([1, 2], "text", None):
        with pytest.raises(ConfigInvalid, match="config must be a JSON object"):
            validate_handler_config("echo", config)
    for duration in (-0.1, 60.5, float("nan"), float("inf"), 10**400, None, "3"):
        with pytest.raises(ConfigInvalid, match='"duration" must be a number of seconds'):
            validate_handler_config("progress", {"duration": duration})
    with pytest.raises(ConfigInvalid, match="not a valid URL"):
        validate_handler_config("a2a_proxy", {"url": "http://[::1"})
    with pytest.raises(ConfigInvalid, match="not valid HTTP"):
        validate_handler_config("a2a_proxy", {"url": "http://8.8.8.8/", "headers": {"X-A": "1\r\nX-B: 2"}})
    with pytest.raises(HandlerNotAvailable):
        validate_handler_config("agents.builtin.echo.EchoAgentExecutor", {})


def test_the_agent_command_takes_a_config_and_refuses_a_bad_one(stored):
    slug = new_slug("cli-config")

    def create(config: str) -> None:
        call_command(
            "agent", "create", "--tenant", "acme", "--slug", slug, "--handler", "progress", "--config", config
        )

    with pytest.raises(CommandError, match=r'^config: "duration" must be a number of seconds'):
        create('{"duration": "abc"}')
    with pytest.raises(CommandError, match="--config is not valid JSON"):
        create("{")
    assert not Agent.objects.filter(tenant__slug="acme", slug=slug).exists()
    assert audit_events(slug) == []
    create('{"duration": 1}')
    assert Agent.objects.get(tenant__slug="acme", slug=slug).config == {"duration": 1}


def _admin_session(base_url: str) -> httpx.Client:
    from django.contrib.auth import get_user_model

    username = "config-admin"
    User = get_user_model()
    if not User.objects.filter(username=username).exists():
        User.objects.create_superuser(username, email="", password=tenancy.PASSWORD)
    session = httpx.Client(base_url=base_url, timeout=30)
    login = session.get("/admin/login/")
    signed_in = session.post(
        "/admin/login/?next=/admin/",
        data={
            "csrfmiddlewaretoken": _csrf_field(login.text),
            "username": username,
            "password": tenancy.PASSWORD,
            "next": "/admin/",
        },
        headers={"Referer": f"{base_url}/admin/login/"},
    )
    assert signed_in.status_code == 302, signed_in.text
    return session


def _csrf_field(html: str) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1)


def test_the_django_admin_shows_the_message_next_to_the_config(trio):
    session = _admin_session(trio.base_url)
    slug = new_slug("admin-config")
    form = session.get("/admin/agents/agent/add/")
    assert form.status_code == 200
    fields = {
        "csrfmiddlewaretoken": _csrf_field(form.text),
        "tenant": str(trio.tenants["acme"].pk),
        "slug": slug,
        "name": "Admin made",
        "description": "",
        "version": "1.0.0",
        "skills": "[]",
        "handler": "progress",
        "config": '{"duration": "abc"}',
        "enabled": "on",
        "visibility": "public",
    }
    headers = {"Referer": f"{trio.base_url}/admin/agents/agent/add/"}
    refused = session.post("/admin/agents/agent/add/", data=fields, headers=headers)
    assert refused.status_code == 200
    assert "&quot;duration&quot; must be a number of seconds from 0 to 60" in refused.text
    # On the config row itself, not only in the note at the top.
    assert 'class="form-row errors field-config"' in refused.text
    assert not Agent.objects.filter(tenant__slug="acme", slug=slug).exists()
    unknown = session.post(
        "/admin/agents/agent/add/", data={**fields, "handler": "os.system"}, headers=headers
    )
    assert "handler must be one of:" in unknown.text
    fields["config"] = '{"duration": 1}'
    saved = session.post("/admin/agents/agent/add/", data=fields, headers=headers)
    assert saved.status_code == 302, saved.text
    assert Agent.objects.get(tenant__slug="acme", slug=slug).config == {"duration": 1}
    session.close()
