"""Input and output serializers of the management API: `<Entity><Action>Input` / `<Entity>Output`."""

from a2a.types import a2a_pb2 as pb
from django.conf import settings
from google.protobuf.json_format import ParseDict
from rest_framework import serializers

from agents.models import MAX_TURN_TIMEOUT, Agent
from agents.registry import config_shown
from tasks_app.models import TaskState
from tenants.models import MAX_RATE_PER_MINUTE, MAX_RETENTION_DAYS, MAX_RUNNING_TURNS, Membership
from tenants.services import GRANT_TYPES

SLUG_PATTERN = r"^[a-z0-9](?:[a-z0-9-]{0,48}[a-z0-9])?$"
# The skill flag agents/cards.py reads to keep a skill off the public card.
EXTENDED_ONLY = "extendedOnly"


def _has_nul(value) -> bool:
    """True if a NUL character hides anywhere in a JSON value (PostgreSQL jsonb refuses it)."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


def validate_skills(skills):
    if not isinstance(skills, list) or _has_nul(skills):
        raise serializers.ValidationError("skills must be a list of AgentSkill objects")
    for skill in skills:
        if not isinstance(skill, dict):
            raise serializers.ValidationError("each skill must be an object")
        card_skill = {key: value for key, value in skill.items() if key != EXTENDED_ONLY}
        try:
            parsed = ParseDict(card_skill, pb.AgentSkill())
        except Exception as exc:  # protobuf raises ParseError and TypeError alike
            raise serializers.ValidationError(f"invalid skill: {exc}") from None
        # What would break the agent card later must be refused now.
        if not (parsed.id and parsed.name and parsed.description):
            raise serializers.ValidationError("each skill needs id, name and description")
    return skills


def validate_config(config):
    if not isinstance(config, dict) or _has_nul(config):
        raise serializers.ValidationError("config must be a JSON object")
    return config


# --- Tenants ----------------------------------------------------------------------
class TenantOutput(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    role = serializers.ChoiceField(choices=Membership.Role.choices, help_text="Your role in this tenant")
    max_running_turns = serializers.IntegerField(
        allow_null=True, help_text="Agent turns queued or running at once; null: no limit"
    )
    rate_limit_per_minute = serializers.IntegerField(
        allow_null=True,
        help_text="A2A requests per minute per client (or address, anonymous); null: no limit",
    )
    retention_days = serializers.IntegerField(
        allow_null=True, help_text="Days a finished task is kept after its last update; null: forever"
    )


class TenantUsageOutput(serializers.Serializer):
    running_turns = serializers.IntegerField(help_text="Turns queued or running now")
    requests_this_minute = serializers.IntegerField(
        help_text="A2A requests in the current minute (counted while a rate limit is set)"
    )


class TenantDetailOutput(TenantOutput):
    usage = TenantUsageOutput()


def _limit_field(most: int, what: str) -> serializers.IntegerField:
    return serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=most, help_text=f"{what}; null for no limit"
    )


class TenantUpdateInput(serializers.Serializer):
    name = serializers.CharField(required=False, max_length=200, allow_blank=False)
    max_running_turns = _limit_field(MAX_RUNNING_TURNS, "Agent turns queued or running at once")
    rate_limit_per_minute = _limit_field(MAX_RATE_PER_MINUTE, "A2A requests per minute per client")
    retention_days = _limit_field(MAX_RETENTION_DAYS, "Days a finished task is kept (null: forever)")

    def validate_name(self, value):
        if "\x00" in value:
            raise serializers.ValidationError("name must not contain NUL characters")
        return value


# --- Agents -----------------------------------------------------------------------
class AgentOutput(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    description = serializers.CharField()
    version = serializers.CharField()
    handler = serializers.CharField()
    skills = serializers.JSONField()
    config = serializers.SerializerMethodField(
        help_text="The handler's settings; values its schema marks writeOnly (secrets) are hidden "
        "from those who may not edit the agent"
    )
    turn_timeout = serializers.IntegerField(help_text="Seconds one turn may run before it is stopped")
    enabled = serializers.BooleanField()
    visibility = serializers.ChoiceField(choices=Agent.Visibility.choices)
    url = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    def get_url(self, agent) -> str:
        return f"/a2a/{agent.tenant.slug}/{agent.slug}/"

    def get_config(self, agent) -> dict:
        # Context "may_edit": whether the reader may change the agent (the view decides).
        return config_shown(agent, may_edit=self.context.get("may_edit", False))


class AgentCreateInput(serializers.Serializer):
    slug = serializers.RegexField(SLUG_PATTERN, max_length=50)
    handler = serializers.CharField(max_length=200, help_text="A name from the handler registry")
    name = serializers.CharField(max_length=200, required=False, allow_blank=True)
    description = serializers.CharField(max_length=5000, required=False, allow_blank=True)
    version = serializers.CharField(max_length=50, required=False)
    skills = serializers.JSONField(required=False, validators=[validate_skills])
    config = serializers.JSONField(required=False, validators=[validate_config])
    turn_timeout = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_TURN_TIMEOUT,
        help_text="Seconds one turn may run before it is stopped and its task fails (default 600)",
    )
    enabled = serializers.BooleanField(required=False)
    visibility = serializers.ChoiceField(choices=Agent.Visibility.choices, required=False)


class AgentUpdateInput(serializers.Serializer):
    handler = serializers.CharField(max_length=200, required=False)
    name = serializers.CharField(max_length=200, required=False)
    description = serializers.CharField(max_length=5000, required=False, allow_blank=True)
    version = serializers.CharField(max_length=50, required=False)
    skills = serializers.JSONField(required=False, validators=[validate_skills])
    config = serializers.JSONField(required=False, validators=[validate_config])
    turn_timeout = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_TURN_TIMEOUT,
        help_text="Seconds one turn may run before it is stopped and its task fails (default 600)",
    )
    enabled = serializers.BooleanField(required=False)
    visibility = serializers.ChoiceField(choices=Agent.Visibility.choices, required=False)


class AgentCardOutput(serializers.Serializer):
    public = serializers.JSONField(help_text="The card at .well-known/agent-card.json")
    extended = serializers.JSONField(
        allow_null=True, help_text="The card GetExtendedAgentCard serves (authenticated agents only)"
    )


class HandlerOutput(serializers.Serializer):
    name = serializers.CharField()
    title = serializers.CharField()
    description = serializers.CharField()
    config_schema = serializers.JSONField(
        allow_null=True,
        help_text="JSON Schema of the handler's config (null: any JSON object); every write is checked by it",
    )
    default_config = serializers.JSONField(help_text="The values the handler uses for keys left out")
    default_skills = serializers.JSONField(help_text="The card's skills when an agent lists none")


class AgentImportInput(serializers.Serializer):
    card_url = serializers.CharField(
        max_length=2000, help_text="URL of the remote agent's card (A2A 1.0 or 0.3)"
    )
    slug = serializers.RegexField(SLUG_PATTERN, max_length=50)
    name = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    visibility = serializers.ChoiceField(
        choices=Agent.Visibility.choices, required=False, default=Agent.Visibility.AUTHENTICATED
    )


# --- OAuth clients ------------------------------------------------------------------
class OAuthClientOutput(serializers.Serializer):
    client_id = serializers.CharField()
    name = serializers.CharField()
    grant = serializers.SerializerMethodField()
    scopes = serializers.SerializerMethodField()
    redirect_uris = serializers.CharField()
    created_at = serializers.DateTimeField(source="created")
    revoked_at = serializers.DateTimeField(allow_null=True)

    def get_grant(self, client) -> str:
        return next(
            (name for name, value in GRANT_TYPES.items() if value == client.authorization_grant_type), ""
        )

    def get_scopes(self, client) -> list[str]:
        return sorted(client.scope_set)


class OAuthClientCreatedOutput(OAuthClientOutput):
    client_secret = serializers.CharField(
        allow_null=True, help_text="Shown only in this response; stored hashed. Null for public clients."
    )


class OAuthClientCreateInput(serializers.Serializer):
    name = serializers.CharField(max_length=255, required=False, allow_blank=True)
    scopes = serializers.ListField(
        child=serializers.ChoiceField(choices=list(settings.OAUTH2_PROVIDER["SCOPES"])),
        required=False,
        allow_empty=False,
    )
    grant = serializers.ChoiceField(choices=list(GRANT_TYPES), default="client-credentials")
    redirect_uris = serializers.ListField(
        child=serializers.URLField(max_length=500), required=False, default=list, max_length=10
    )


# --- Tasks ------------------------------------------------------------------------
class TaskOutput(serializers.Serializer):
    id = serializers.UUIDField()
    agent = serializers.CharField(source="agent.slug")
    context_id = serializers.CharField(source="context.context_id")
    state = serializers.ChoiceField(choices=TaskState.choices)
    owner = serializers.CharField(help_text="Who created it: client:<id>, user:<id> or anonymous")
    status_timestamp = serializers.DateTimeField()
    created_at = serializers.DateTimeField()
    event_seq = serializers.IntegerField(
        help_text="The task's last log entry: sent back with an answer or a decision, "
        "it is refused (409) if the task has moved on since"
    )


class TaskDetailOutput(TaskOutput):
    task = serializers.JSONField(help_text="The A2A Task in 1.0 ProtoJSON, with history and artifacts")


class TaskListQuery(serializers.Serializer):
    state = serializers.ChoiceField(choices=TaskState.choices, required=False)
    agent = serializers.RegexField(SLUG_PATTERN, max_length=50, required=False)
    context_id = serializers.CharField(max_length=255, required=False)
    owner = serializers.CharField(max_length=255, required=False)
    updated_after = serializers.DateTimeField(required=False)


class TaskDecisionInput(serializers.Serializer):
    event_seq = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=2**31 - 1,
        help_text="The task's event_seq as you read it: 409 if it has moved on since (asked again, say)",
    )


class TaskAnswerInput(TaskDecisionInput):
    text = serializers.CharField(max_length=20000)


# --- Members ------------------------------------------------------------------------
class MemberOutput(serializers.Serializer):
    username = serializers.CharField(source="user.username")
    role = serializers.ChoiceField(choices=Membership.Role.choices)
    created_at = serializers.DateTimeField()


class MemberAddInput(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    role = serializers.ChoiceField(choices=Membership.Role.choices)


class MemberUpdateInput(serializers.Serializer):
    role = serializers.ChoiceField(choices=Membership.Role.choices)


# --- Audit --------------------------------------------------------------------------
class AuditEventOutput(serializers.Serializer):
    actor = serializers.CharField()
    action = serializers.CharField()
    target_type = serializers.CharField()
    target_id = serializers.CharField()
    details = serializers.JSONField()
    created_at = serializers.DateTimeField()


class ErrorOutput(serializers.Serializer):
    detail = serializers.CharField()
