from django.db import models

from a2a_platform.tenants.models import Tenant, slug_validator


class Agent(models.Model):
    """One hosted agent: a handler from the registry bound to one tenant."""

    class Visibility(models.TextChoices):
        PUBLIC = "public", "Public (no credentials needed)"
        AUTHENTICATED = "authenticated", "Authenticated (OAuth2 bearer token)"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="agents")
    slug = models.CharField(max_length=50, validators=[slug_validator])
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True, default="")
    version = models.CharField(max_length=50, default="1.0.0")
    # AgentSkill objects in ProtoJSON form: [{"id", "name", "description", "tags", "examples"}].
    skills = models.JSONField(default=list, blank=True)
    handler = models.CharField(max_length=200)
    config = models.JSONField(default=dict, blank=True)
    enabled = models.BooleanField(default=True)
    visibility = models.CharField(max_length=20, choices=Visibility.choices, default=Visibility.PUBLIC)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "slug"], name="agent_tenant_slug_unique")]
        indexes = [models.Index(fields=["tenant", "enabled"], name="agent_tenant_enabled_idx")]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.slug}"

    @property
    def is_public(self) -> bool:
        return self.visibility == self.Visibility.PUBLIC
