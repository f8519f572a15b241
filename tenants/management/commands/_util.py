"""Shared bits of the platform-operator commands."""

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError

from tenants.access import get_tenant
from tenants.models import Tenant

# Commands are run by whoever operates the platform; the audit log names them so.
CLI_ACTOR = "system:cli"


def tenant_or_error(slug: str) -> Tenant:
    tenant = get_tenant(slug)
    if tenant is None:
        raise CommandError(f"No tenant '{slug}'")
    return tenant


def validation_message(error: ValidationError) -> str:
    if hasattr(error, "message_dict"):
        return "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in error.message_dict.items())
    return " ".join(error.messages)
