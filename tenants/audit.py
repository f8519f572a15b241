from tenants.models import AuditEvent, Tenant


def audit_record(
    *, tenant: Tenant, actor: str, action: str, target_type: str, target_id: str, details: dict | None = None
) -> AuditEvent:
    """Record an operator action or a credential/agent change. Call inside the change's transaction."""
    return AuditEvent.objects.create(
        tenant=tenant,
        actor=actor,
        action=action,
        target_type=target_type,
        target_id=str(target_id),
        details=details or {},
    )
