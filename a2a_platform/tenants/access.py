"""Tenant lookups. Every request path resolves its tenant through here."""

from a2a_platform.tenants.models import Tenant


def get_tenant(slug: str) -> Tenant | None:
    return Tenant.objects.filter(slug=slug).first()
