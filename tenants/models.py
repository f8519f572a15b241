from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from oauth2_provider.models import AbstractApplication

slug_validator = RegexValidator(
    r"^[a-z0-9](?:[a-z0-9-]{0,48}[a-z0-9])?$",
    "Use 1-50 lowercase letters, digits or hyphens, not starting or ending with a hyphen.",
)


# Upper bounds keep a typo from meaning "unlimited in practice" and every value within an int.
MAX_RUNNING_TURNS = 100_000
MAX_RATE_PER_MINUTE = 1_000_000
MAX_RETENTION_DAYS = 36_500

# The quota and retention settings, as tenant_settings_update and the audit log name them.
LIMIT_FIELDS = ("max_running_turns", "rate_limit_per_minute", "retention_days")


class Tenant(models.Model):
    slug = models.CharField(max_length=50, unique=True, validators=[slug_validator])
    name = models.CharField(max_length=200)
    # Quotas (tasks_app/quotas.py) and retention (tasks_app/retention.py); None means no limit.
    max_running_turns = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_RUNNING_TURNS)],
        help_text="Most agent turns queued or running at once for this tenant; empty for no limit.",
    )
    rate_limit_per_minute = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_RATE_PER_MINUTE)],
        help_text="Most A2A requests per minute from each OAuth client (or each address, "
        "for anonymous callers of public agents); empty for no limit.",
    )
    retention_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_RETENTION_DAYS)],
        help_text="Days a finished task is kept after its last update; empty to keep tasks forever.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.slug


class Membership(models.Model):
    class Role(models.TextChoices):
        OWNER = "owner", "Owner"
        OPERATOR = "operator", "Operator"
        VIEWER = "viewer", "Viewer"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="membership_user_tenant_unique")
        ]

    def __str__(self) -> str:
        return f"{self.user} @ {self.tenant} ({self.role})"


class Application(AbstractApplication):
    """An OAuth2 client that belongs to exactly one tenant.

    Tokens issued to it act only on that tenant's agents, and only with the
    scopes listed in allowed_scopes.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="oauth_clients")
    allowed_scopes = models.CharField(max_length=255, blank=True, default="")
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta(AbstractApplication.Meta):
        swappable = "OAUTH2_PROVIDER_APPLICATION_MODEL"

    @property
    def scope_set(self) -> frozenset[str]:
        return frozenset(self.allowed_scopes.split())

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    def is_usable(self, request) -> bool:
        # DOT asks this both when issuing a token and when checking a bearer token,
        # so revoking the client also stops every token it already holds.
        return not self.is_revoked and super().is_usable(request)


class AuditEvent(models.Model):
    """Who did what to which object of a tenant, and when. Written by services only."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="audit_events")
    # "user:<username>", "client:<client_id>" or "system".
    actor = models.CharField(max_length=255)
    action = models.CharField(max_length=64)
    target_type = models.CharField(max_length=64)
    target_id = models.CharField(max_length=255)
    details = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["tenant", "-created_at"], name="audit_tenant_recent_idx")]
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.actor} {self.action} {self.target_type}:{self.target_id}"
