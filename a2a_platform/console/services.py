"""Console writes that are not task operations: agents and OAuth clients.

Each change is recorded in the tenant's audit log in the same transaction.
The management API (issue 4) grows its own services for the same nouns; these
should merge with them once both exist.
"""

from django.db import transaction
from django.utils import timezone
from oauth2_provider.generators import generate_client_secret
from oauth2_provider.models import get_access_token_model, get_refresh_token_model

from a2a_platform.tenants.audit import audit_record
from a2a_platform.tenants.models import Application, Tenant
from agents.models import Agent


def _actor(user) -> str:
    return f"user:{user.username}"


@transaction.atomic
def agent_register(*, tenant: Tenant, user, agent: Agent) -> Agent:
    """Store a new agent of the tenant (built by a validated form)."""
    agent.tenant = tenant
    agent.save()
    audit_record(
        tenant=tenant,
        actor=_actor(user),
        action="agent.register",
        target_type="agent",
        target_id=agent.slug,
        details={"handler": agent.handler, "visibility": agent.visibility},
    )
    return agent


@transaction.atomic
def agent_update(*, user, agent: Agent, changed: list[str]) -> Agent:
    agent.save()
    audit_record(
        tenant=agent.tenant,
        actor=_actor(user),
        action="agent.update",
        target_type="agent",
        target_id=agent.slug,
        details={"changed": changed},
    )
    return agent


@transaction.atomic
def agent_set_enabled(*, user, agent: Agent, enabled: bool) -> None:
    agent.enabled = enabled
    agent.save(update_fields=["enabled", "updated_at"])
    audit_record(
        tenant=agent.tenant,
        actor=_actor(user),
        action="agent.enable" if enabled else "agent.disable",
        target_type="agent",
        target_id=agent.slug,
    )


@transaction.atomic
def client_create(*, tenant: Tenant, user, name: str, scopes: list[str]) -> tuple[Application, str]:
    """A confidential client-credentials client. Returns it with its secret, which is stored hashed."""
    secret = generate_client_secret()
    client = Application.objects.create(
        tenant=tenant,
        name=name,
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_CLIENT_CREDENTIALS,
        client_secret=secret,
        allowed_scopes=" ".join(scopes),
    )
    audit_record(
        tenant=tenant,
        actor=_actor(user),
        action="client.create",
        target_type="oauth_client",
        target_id=client.client_id,
        details={"name": name, "scopes": scopes},
    )
    return client, secret


@transaction.atomic
def client_revoke(*, user, client: Application) -> None:
    """Revoke a client: its tokens stop working and its secret is replaced by one nobody knows."""
    client.revoked_at = timezone.now()
    client.client_secret = generate_client_secret()
    client.save(update_fields=["revoked_at", "client_secret", "updated"])
    get_refresh_token_model().objects.filter(application=client).delete()
    get_access_token_model().objects.filter(application=client).delete()
    audit_record(
        tenant=client.tenant,
        actor=_actor(user),
        action="client.revoke",
        target_type="oauth_client",
        target_id=client.client_id,
    )
