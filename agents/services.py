"""Changes a tenant admin makes to agents: register, import, update, delete.

The management commands, the management API and the console call these. Each
validates first, writes in one transaction and records an audit event in the
same transaction. Invalid input raises django's ValidationError; the callers
translate it.
"""

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from agents.models import Agent
from agents.outbound import lookups_for
from agents.registry import available_handlers, handler_defaults
from agents.remote_cards import CardUnavailable, RemoteCard, card_fetch, card_url_of
from tenants.audit import audit_record
from tenants.models import Tenant

# The agent fields an admin may set; tenant, timestamps and ids are not among them.
AGENT_FIELDS = (
    "name",
    "description",
    "version",
    "skills",
    "handler",
    "config",
    "turn_timeout",
    "enabled",
    "visibility",
)


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
    with lookups_for(tenant.pk):
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


def agent_import_preview(card_url: str, *, tenant: Tenant) -> RemoteCard:
    """Fetch a remote agent's card (through the outbound screen) to show before importing it.

    Its lookups count as the tenant's. Raises ValidationError on `card_url` saying
    why the card cannot be used.
    """
    try:
        with lookups_for(tenant.pk):
            remote = card_fetch(card_url.strip())
    except CardUnavailable as exc:
        raise ValidationError({"card_url": str(exc)}) from None
    if not remote.jsonrpc_url:
        raise ValidationError(
            {"card_url": "The card lists no JSON-RPC interface, the one the platform's proxy speaks."}
        )
    return remote


def agent_import(
    *, tenant: Tenant, actor: str, card_url: str, slug: str, visibility: str, name: str = ""
) -> Agent:
    """Register an a2a_proxy agent that fronts the remote agent whose card is at `card_url`.

    The card is fetched again here (a preview's copy is never trusted) and gives
    the agent its name, description, version and skills; the proxy calls the
    card's JSON-RPC interface. Callers reach it under this tenant's credentials
    when `visibility` is authenticated.
    """
    remote = agent_import_preview(card_url, tenant=tenant)
    card = remote.card
    config = {"url": remote.jsonrpc_url}
    if card_url.strip() != card_url_of(remote.jsonrpc_url):
        config["card_url"] = card_url.strip()
    return agent_register(
        tenant=tenant,
        actor=actor,
        slug=slug,
        handler="a2a_proxy",
        name=name or card.name[:200],
        description=card.description,
        version=(card.version or "1.0.0")[:50],
        skills=remote.data.get("skills", []),
        config=config,
        visibility=visibility,
    )


def agent_update(*, agent: Agent, actor: str, **fields) -> Agent:
    """Change an agent's fields; a change of visibility is audited as its own action, with both values."""
    changed = {name: value for name, value in fields.items() if name in AGENT_FIELDS}
    if "handler" in changed:
        _check_handler(changed["handler"])
    visibility_before = agent.visibility
    if "visibility" in changed and agent.pk:
        # The stored value: a ModelForm (the console) has already set the new one on `agent`.
        visibility_before = Agent.objects.filter(pk=agent.pk).values_list("visibility", flat=True).first()
    for name, value in changed.items():
        setattr(agent, name, value)
    # Outside the transaction, as in agent_register.
    with lookups_for(agent.tenant_id):
        agent.full_clean(validate_unique=False, validate_constraints=False)
    if agent.visibility == visibility_before:
        changed.pop("visibility", None)
    others = sorted(set(changed) - {"visibility"})
    if others == ["enabled"]:
        action = "agent.enable" if agent.enabled else "agent.disable"
    else:
        action = "agent.update"
    with transaction.atomic():
        # Only the fields sent: a concurrent edit of another field survives.
        agent.save(update_fields=[*changed, "updated_at"])
        if "visibility" in changed:
            # Opening an agent to anonymous callers (or closing it) is a security change of its own.
            audit_record(
                tenant=agent.tenant,
                actor=actor,
                action="agent.visibility",
                target_type="agent",
                target_id=agent.slug,
                details={"from": visibility_before, "to": agent.visibility},
            )
        if others or not changed:
            # Config may hold the handler's secrets (API keys): record which fields changed, not values.
            audit_record(
                tenant=agent.tenant,
                actor=actor,
                action=action,
                target_type="agent",
                target_id=agent.slug,
                details={"fields": others},
            )
    return agent


@transaction.atomic
def agent_delete(*, agent: Agent, actor: str) -> None:
    audit_record(
        tenant=agent.tenant, actor=actor, action="agent.delete", target_type="agent", target_id=agent.slug
    )
    agent.delete()
