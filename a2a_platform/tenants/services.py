"""Changes a tenant admin makes: tenants, members, OAuth clients and agents.

The management commands and the management API both call these. Each one
validates first, writes in one transaction, and records an audit event in the
same transaction, so a change is never without its record. Invalid input
raises django's ValidationError; the callers translate it.
"""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from oauth2_provider.generators import generate_client_secret
from oauth2_provider.models import AccessToken, RefreshToken

from a2a_platform.tenants.audit import audit_record
from a2a_platform.tenants.models import Application, Membership, Tenant
from agents.models import Agent
from agents.registry import available_handlers, handler_defaults

GRANT_TYPES = {
    "client-credentials": Application.GRANT_CLIENT_CREDENTIALS,
    "authorization-code": Application.GRANT_AUTHORIZATION_CODE,
}
# The agent fields an admin may set; tenant, timestamps and ids are not among them.
AGENT_FIELDS = ("name", "description", "version", "skills", "handler", "config", "enabled", "visibility")


def known_scopes() -> list[str]:
    return list(settings.OAUTH2_PROVIDER["SCOPES"])


@transaction.atomic
def tenant_create(*, slug: str, name: str = "", actor: str = "system") -> Tenant:
    tenant = Tenant(slug=slug, name=name or slug)
    tenant.full_clean()
    tenant.save()
    audit_record(tenant=tenant, actor=actor, action="tenant.create", target_type="tenant", target_id=slug)
    return tenant


def _owner_count(tenant: Tenant) -> int:
    return Membership.objects.filter(tenant=tenant, role=Membership.Role.OWNER).count()


@transaction.atomic
def membership_set(*, tenant: Tenant, user, role: str, actor: str) -> Membership:
    """Make `user` a member of `tenant` with `role`, or change the role they have."""
    if role not in Membership.Role.values:
        raise ValidationError(f"role must be one of {', '.join(Membership.Role.values)}")
    membership = Membership.objects.select_for_update().filter(tenant=tenant, user=user).first()
    before = membership.role if membership else None
    if membership is None:
        membership = Membership.objects.create(tenant=tenant, user=user, role=role)
    elif before != role:
        if before == Membership.Role.OWNER and _owner_count(tenant) == 1:
            raise ValidationError("A tenant keeps at least one owner")
        membership.role = role
        membership.save(update_fields=["role"])
    audit_record(
        tenant=tenant,
        actor=actor,
        action="member.add" if before is None else "member.role_change",
        target_type="member",
        target_id=user.username,
        details={"role": role, "previous_role": before},
    )
    return membership


@transaction.atomic
def membership_remove(*, membership: Membership, actor: str) -> None:
    if membership.role == Membership.Role.OWNER and _owner_count(membership.tenant) == 1:
        raise ValidationError("A tenant keeps at least one owner")
    membership.delete()
    audit_record(
        tenant=membership.tenant,
        actor=actor,
        action="member.remove",
        target_type="member",
        target_id=membership.user.username,
    )


@transaction.atomic
def oauth_client_create(
    *,
    tenant: Tenant,
    actor: str,
    name: str = "",
    scopes: list[str] | None = None,
    grant: str = "client-credentials",
    redirect_uris: str = "",
) -> tuple[Application, str | None]:
    """Create a client of `tenant`; returns it with its secret in clear, the only time it exists.

    Client-credentials clients are confidential and get a secret. Authorization
    code clients are public (PKCE, no secret) and need a redirect URI.
    """
    scopes = list(dict.fromkeys(scopes if scopes is not None else settings.OAUTH2_PROVIDER["DEFAULT_SCOPES"]))
    unknown = sorted(set(scopes) - set(known_scopes()))
    if unknown or not scopes:
        raise ValidationError(f"scopes must be a non-empty subset of: {', '.join(known_scopes())}")
    if grant not in GRANT_TYPES:
        raise ValidationError(f"grant must be one of {', '.join(GRANT_TYPES)}")
    interactive = grant == "authorization-code"
    if interactive and not redirect_uris.strip():
        raise ValidationError("An authorization-code client needs at least one redirect URI")
    secret = None if interactive else generate_client_secret()
    client = Application(
        tenant=tenant,
        name=name or f"{tenant.slug} client",
        client_type=Application.CLIENT_PUBLIC if interactive else Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=GRANT_TYPES[grant],
        redirect_uris=redirect_uris.strip(),
        allowed_scopes=" ".join(scopes),
        client_secret=secret or "",
        # DOT's ClientSecretField hashes on save; the clear secret leaves only through our return value.
        hash_client_secret=True,
    )
    client.full_clean(exclude=["client_secret", "user"])
    client.save()
    audit_record(
        tenant=tenant,
        actor=actor,
        action="oauth_client.create",
        target_type="oauth_client",
        target_id=client.client_id,
        details={"name": client.name, "scopes": scopes, "grant": grant},
    )
    return client, secret


@transaction.atomic
def oauth_client_revoke(*, client: Application, actor: str) -> Application:
    """Revoke a client: it gets no new token and the tokens it holds stop working at once."""
    if client.revoked_at is None:
        client.revoked_at = timezone.now()
        client.save(update_fields=["revoked_at", "updated"])
        AccessToken.objects.filter(application=client).delete()
        RefreshToken.objects.filter(application=client, revoked__isnull=True).update(revoked=timezone.now())
        audit_record(
            tenant=client.tenant,
            actor=actor,
            action="oauth_client.revoke",
            target_type="oauth_client",
            target_id=client.client_id,
        )
    return client


def _check_handler(name: str) -> None:
    if name not in available_handlers():
        raise ValidationError(f"handler must be one of: {', '.join(sorted(available_handlers()))}")


def agent_register(*, tenant: Tenant, actor: str, slug: str, handler: str, **fields) -> Agent:
    """Bind a registry handler to `tenant` as a new agent at /a2a/<tenant>/<slug>/."""
    _check_handler(handler)
    defaults = handler_defaults(handler)
    agent = Agent(
        tenant=tenant,
        slug=slug,
        handler=handler,
        name=fields.pop("name", "") or slug,
        description=fields.pop("description", "") or defaults["description"],
        skills=fields.pop("skills", None) or defaults["skills"],
    )
    for name, value in fields.items():
        if name in AGENT_FIELDS:
            setattr(agent, name, value)
    # Outside the transaction: a handler's config check may resolve DNS (an a2a_proxy URL),
    # and SQLite holds its write lock from the transaction's first statement.
    agent.full_clean(validate_unique=False, validate_constraints=False)
    with transaction.atomic():
        try:
            with transaction.atomic():
                agent.save()
        except IntegrityError:
            raise ValidationError(f"Tenant '{tenant.slug}' already has an agent '{slug}'") from None
        audit_record(
            tenant=tenant,
            actor=actor,
            action="agent.create",
            target_type="agent",
            target_id=slug,
            details={"handler": handler, "visibility": agent.visibility},
        )
    return agent


def agent_update(*, agent: Agent, actor: str, **fields) -> Agent:
    changed = {name: value for name, value in fields.items() if name in AGENT_FIELDS}
    if "handler" in changed:
        _check_handler(changed["handler"])
    for name, value in changed.items():
        setattr(agent, name, value)
    # Outside the transaction, as in agent_register.
    agent.full_clean(validate_unique=False, validate_constraints=False)
    if set(changed) == {"enabled"}:
        action = "agent.enable" if agent.enabled else "agent.disable"
    else:
        action = "agent.update"
    with transaction.atomic():
        # Only the fields sent: a concurrent edit of another field survives.
        agent.save(update_fields=[*changed, "updated_at"])
        # Config may hold secrets of the handler (API keys): record which fields changed, not their values.
        audit_record(
            tenant=agent.tenant,
            actor=actor,
            action=action,
            target_type="agent",
            target_id=agent.slug,
            details={"fields": sorted(changed)},
        )
    return agent


@transaction.atomic
def agent_delete(*, agent: Agent, actor: str) -> None:
    audit_record(
        tenant=agent.tenant, actor=actor, action="agent.delete", target_type="agent", target_id=agent.slug
    )
    agent.delete()
