"""Changes a tenant admin makes: tenants, members and OAuth clients (agents: agents/services.py).

The management commands, the management API and the console call these. Each one
validates first, writes in one transaction, and records an audit event in the
same transaction, so a change is never without its record. Invalid input
raises django's ValidationError; the callers translate it.
"""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from oauth2_provider.generators import generate_client_secret
from oauth2_provider.models import AccessToken, RefreshToken

from tenants.audit import audit_record
from tenants.models import LIMIT_FIELDS, Application, Membership, Tenant

GRANT_TYPES = {
    "client-credentials": Application.GRANT_CLIENT_CREDENTIALS,
    "authorization-code": Application.GRANT_AUTHORIZATION_CODE,
}


def known_scopes() -> list[str]:
    return list(settings.OAUTH2_PROVIDER["SCOPES"])


@transaction.atomic
def tenant_create(*, slug: str, name: str = "", actor: str = "system") -> Tenant:
    tenant = Tenant(slug=slug, name=name or slug)
    tenant.full_clean()
    tenant.save()
    audit_record(tenant=tenant, actor=actor, action="tenant.create", target_type="tenant", target_id=slug)
    return tenant


# Sent to mean "leave this setting as it is" (None means "no limit").
UNCHANGED = object()


@transaction.atomic
def tenant_settings_update(*, tenant: Tenant, actor: str, **changes) -> Tenant:
    """Change a tenant's name, quotas or retention; one audit event lists what changed.

    `changes` holds any of name and LIMIT_FIELDS (None: no limit). A value equal
    to the current one is no change and is not audited.
    """
    unknown = sorted(set(changes) - {"name", *LIMIT_FIELDS})
    if unknown:
        raise ValidationError(f"Unknown tenant setting(s): {', '.join(unknown)}")
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    changed = {}
    for field, value in changes.items():
        if value is UNCHANGED or getattr(tenant, field) == value:
            continue
        changed[field] = {"from": getattr(tenant, field), "to": value}
        setattr(tenant, field, value)
    if not changed:
        return tenant
    tenant.full_clean()
    tenant.save(update_fields=list(changed))
    audit_record(
        tenant=tenant,
        actor=actor,
        action="tenant.settings_change",
        target_type="tenant",
        target_id=tenant.slug,
        details=changed,
    )
    return tenant


def _owner_count(tenant: Tenant) -> int:
    return Membership.objects.filter(tenant=tenant, role=Membership.Role.OWNER).count()


def _lock_members(tenant: Tenant) -> None:
    """Lock the tenant's row for the transaction: changes to its members queue on it.

    Else two owners demoting (or removing) each other at once each count two
    owners, and the tenant is left with none.
    """
    list(Tenant.objects.select_for_update().filter(pk=tenant.pk).values_list("pk", flat=True))


@transaction.atomic
def membership_set(*, tenant: Tenant, user, role: str, actor: str) -> Membership:
    """Make `user` a member of `tenant` with `role`, or change the role they have."""
    if role not in Membership.Role.values:
        raise ValidationError(f"role must be one of {', '.join(Membership.Role.values)}")
    _lock_members(tenant)
    membership = Membership.objects.filter(tenant=tenant, user=user).first()
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
    _lock_members(membership.tenant)
    role = Membership.objects.filter(pk=membership.pk).values_list("role", flat=True).first()
    if role is None:
        return  # removed meanwhile
    if role == Membership.Role.OWNER and _owner_count(membership.tenant) == 1:
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
def oauth_client_rotate_secret(*, client: Application, actor: str) -> str:
    """Give a confidential client a new secret, returned in clear this once (stored hashed).

    For a secret that was lost or leaked: the old secret stops working, and so
    do the tokens issued so far (whoever held the old secret may hold those).
    """
    if client.revoked_at is not None:
        raise ValidationError("This client is revoked; create a new one instead")
    if client.client_type != Application.CLIENT_CONFIDENTIAL:
        raise ValidationError("This client has no secret (it is a public, authorization-code client)")
    secret = generate_client_secret()
    client.client_secret = secret
    client.save(update_fields=["client_secret", "updated"])
    AccessToken.objects.filter(application=client).delete()
    RefreshToken.objects.filter(application=client, revoked__isnull=True).update(revoked=timezone.now())
    audit_record(
        tenant=client.tenant,
        actor=actor,
        action="oauth_client.rotate_secret",
        target_type="oauth_client",
        target_id=client.client_id,
    )
    return secret


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
