"""The demo tenant a new user gets on first start. Running it again changes nothing."""

import secrets
from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.db import transaction

from a2a_platform.tenants.models import Membership, Tenant
from agents.models import Agent
from agents.registry import handler_defaults

DEMO_AGENTS = [
    # slug, name, handler, visibility
    ("echo", "Hello World Agent", "echo", Agent.Visibility.PUBLIC),
]


@dataclass
class SeedResult:
    agents: list[str] = field(default_factory=list)
    # Only set when the admin user was created by this run: it is shown once.
    admin_password: str | None = None


@transaction.atomic
def seed_demo() -> SeedResult:
    result = SeedResult()
    tenant, _ = Tenant.objects.get_or_create(slug="demo", defaults={"name": "Demo"})
    for slug, name, handler, visibility in DEMO_AGENTS:
        defaults = handler_defaults(handler)
        Agent.objects.get_or_create(
            tenant=tenant,
            slug=slug,
            defaults={
                "name": name,
                "handler": handler,
                "description": defaults["description"],
                "skills": defaults["skills"],
                "visibility": visibility,
            },
        )
        result.agents.append(slug)
    User = get_user_model()
    if not User.objects.filter(username="admin").exists():
        result.admin_password = secrets.token_urlsafe(12)
        admin = User.objects.create_superuser("admin", email="", password=result.admin_password)
        Membership.objects.create(user=admin, tenant=tenant, role=Membership.Role.OWNER)
    return result
