"""The demo tenant a new user gets on first start. Running it again changes nothing
(except where the demo proxy points: at the echo agent of the server being started)."""

import os
import re
import secrets
import shlex
import sys
from dataclasses import dataclass, field

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from agents.models import Agent
from agents.registry import handler_defaults
from tenants.models import Application, Membership, Tenant
from tenants.services import oauth_client_create

DEMO_AGENTS = [
    # slug, name, handler, visibility
    ("echo", "Hello World Agent", "echo", Agent.Visibility.PUBLIC),
    ("clarify", "Clarifying Agent", "clarify", Agent.Visibility.PUBLIC),
    ("approval", "Approval Agent", "approval", Agent.Visibility.PUBLIC),
    ("progress", "Long-running Agent", "progress", Agent.Visibility.PUBLIC),
    # Slugs allow lowercase letters, digits and hyphens only, hence "a2a-proxy"
    # for the "a2a_proxy" handler. It fronts this server's own echo agent on
    # loopback (allowed while DEBUG is on), so it works out of the box.
    ("a2a-proxy", "A2A Proxy Agent", "a2a_proxy", Agent.Visibility.PUBLIC),
    # The echo agent behind OAuth2: call it with the demo client's token.
    ("secure-echo", "Secure Echo Agent", "echo", Agent.Visibility.AUTHENTICATED),
]
DEMO_CLIENT_NAME = "Demo client"
DEMO_PROXY = "a2a-proxy"
# A demo proxy config the seed wrote: {} (older seeds) or the local echo of some port.
SEEDED_PROXY_URL = re.compile(r"^http://(127\.0\.0\.1|localhost|\[::1\]):\d+/a2a/demo/echo/$")
ADMIN_USERNAME = "admin"
# How to give the demo client a new secret (the first start's is shown once).
ROTATE_DEMO_SECRET = f"oauth_client rotate-secret --tenant demo --name '{DEMO_CLIENT_NAME}'"


def manage_py() -> str:
    """`manage.py` as a command that works from where this process was started: with the
    interpreter running now (the virtualenv's, so nothing needs activating), relative to the
    current directory when inside it."""
    cwd = os.getcwd()

    def shown(path: str) -> str:
        # abspath, not realpath: a virtualenv's python is a symlink to the base interpreter.
        path = os.path.abspath(path)
        if os.path.commonpath([path, cwd]) == cwd:
            path = os.path.relpath(path, cwd)
            # A bare name would be looked up on PATH instead.
            path = path if os.sep in path else os.path.join(".", path)
        return shlex.quote(path)

    script = shown(str(settings.BASE_DIR / "manage.py"))
    return f"{shown(sys.executable)} {script.removeprefix('./')}"


def admin_lines(password: str | None) -> list[str]:
    """What the banner says about the admin user: who it is, and how to get in without the password."""
    if password:
        first = f"user '{ADMIN_USERNAME}', password: {password}  (shown once)"
    else:
        first = f"user '{ADMIN_USERNAME}' (its password was shown on the first start)"
    return [first, f"forgot it? {manage_py()} changepassword {ADMIN_USERNAME}"]


def demo_proxy_config(local_base_url: str) -> dict:
    return {"url": f"{local_base_url.rstrip('/')}/a2a/demo/echo/"}


@dataclass
class SeedResult:
    agents: list[str] = field(default_factory=list)
    # Only set when the admin user was created by this run: it is shown once.
    admin_password: str | None = None
    demo_client_id: str = ""
    # Only set when the demo client was created by this run: stored hashed, so shown once.
    demo_client_secret: str | None = None


@transaction.atomic
def seed_demo(local_base_url: str = "http://127.0.0.1:8000") -> SeedResult:
    """Create the demo tenant, agents, admin and client; `local_base_url` is where this
    server answers on loopback (`manage.py serve` passes its port), for the demo proxy."""
    result = SeedResult()
    tenant, _ = Tenant.objects.get_or_create(slug="demo", defaults={"name": "Demo"})
    for slug, name, handler, visibility in DEMO_AGENTS:
        defaults = handler_defaults(handler)
        config = demo_proxy_config(local_base_url) if slug == DEMO_PROXY else {}
        agent, created = Agent.objects.get_or_create(
            tenant=tenant,
            slug=slug,
            defaults={
                "name": name,
                "handler": handler,
                "description": defaults["description"],
                "skills": defaults["skills"],
                "visibility": visibility,
                "config": config,
            },
        )
        # Served on another port since: follow it, unless an admin pointed the proxy elsewhere.
        if not created and slug == DEMO_PROXY and agent.config != config and _seeded_proxy(agent.config):
            agent.config = config
            agent.save(update_fields=["config", "updated_at"])
        result.agents.append(slug)
    User = get_user_model()
    if not User.objects.filter(username=ADMIN_USERNAME).exists():
        result.admin_password = secrets.token_urlsafe(12)
        admin = User.objects.create_superuser(ADMIN_USERNAME, email="", password=result.admin_password)
        Membership.objects.create(user=admin, tenant=tenant, role=Membership.Role.OWNER)
    client = Application.objects.filter(tenant=tenant, name=DEMO_CLIENT_NAME).first()
    if client is None:
        client, result.demo_client_secret = oauth_client_create(
            tenant=tenant,
            actor="system:seed",
            name=DEMO_CLIENT_NAME,
            scopes=["a2a:invoke", "a2a:read", "a2a:push"],
        )
    result.demo_client_id = client.client_id
    return result


def _seeded_proxy(config) -> bool:
    return config == {} or (
        isinstance(config, dict)
        and set(config) == {"url"}
        and bool(SEEDED_PROXY_URL.match(str(config.get("url"))))
    )
