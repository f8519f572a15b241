import json

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from agents.registry import ConfigInvalid, HandlerNotAvailable, available_handlers, validate_handler_config
from tenants.models import Tenant, slug_validator

# A day: the longest a single turn may hold a worker.
MAX_TURN_TIMEOUT = 86400


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
    # Seconds one turn of this agent may run; past it the turn is stopped and its task FAILED.
    turn_timeout = models.PositiveIntegerField(
        default=600,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_TURN_TIMEOUT)],
        help_text="Seconds one turn may run before it is stopped and its task fails.",
    )
    enabled = models.BooleanField(default=True)
    visibility = models.CharField(max_length=20, choices=Visibility.choices, default=Visibility.PUBLIC)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "slug"], name="agent_tenant_slug_unique")]
        indexes = [models.Index(fields=["tenant", "enabled"], name="agent_tenant_enabled_idx")]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.slug}"

    def clean(self):
        """Refuse a handler that is not installed and a config the handler cannot run with.

        Every way an agent is created or changed goes through here: the services
        (management API, console, `agent` command) call full_clean(), and so do
        model forms (console, admin). Only a new agent, or a change of its handler
        or config, is checked: a row stored before a rule existed can still be
        renamed or disabled. The check may resolve a host name (a2a_proxy).
        """
        super().clean()
        if not self.handler:
            return  # clean_fields() says it is required

        def key(handler, config) -> tuple[str, str]:
            # As JSON text: true and 1 are equal in Python, not in a config.
            return handler, json.dumps(config, sort_keys=True, default=str)

        checking = key(self.handler, self.config)
        if checking == getattr(self, "_checked_handler_config", None):
            return  # a form already checked these very values on this instance
        if self.pk is not None:
            stored = Agent.objects.filter(pk=self.pk).values_list("handler", "config").first()
            if stored is not None and key(*stored) == checking:
                return
        if self.handler not in available_handlers():
            raise ValidationError(
                {"handler": f"handler must be one of: {', '.join(sorted(available_handlers()))}"}
            )
        try:
            validate_handler_config(self.handler, self.config)
        except HandlerNotAvailable as exc:
            raise ValidationError({"handler": str(exc)}) from None
        except ConfigInvalid as exc:
            raise ValidationError({"config": str(exc)}) from None
        self._checked_handler_config = checking

    @property
    def is_public(self) -> bool:
        return self.visibility == self.Visibility.PUBLIC
