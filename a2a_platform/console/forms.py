import json

from django import forms
from django.conf import settings
from google.protobuf.json_format import ParseError

from agents.cards import card_dict
from agents.forms import AgentChecksAfterFields
from agents.models import Agent
from agents.registry import handler_choices
from tenants.models import MAX_RATE_PER_MINUTE, MAX_RETENTION_DAYS, MAX_RUNNING_TURNS


def _parse_json(value: str, what: str):
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise forms.ValidationError(
            f"{what} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}."
        ) from None


class AgentForm(AgentChecksAfterFields):
    handler = forms.ChoiceField(
        choices=handler_choices,
        help_text="The behaviour this agent runs, from the platform's handler registry.",
    )
    skills = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 6, "spellcheck": "false"}),
        required=False,
        initial="[]",
        help_text='A JSON list of skills: [{"id": "...", "name": "...", "description": "...", '
        '"tags": [...]}]. Leave [] to use the handler\'s own.',
    )
    config = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 6, "spellcheck": "false"}),
        required=False,
        initial="{}",
        help_text="A JSON object handed to the handler; it is checked against the handler's rules.",
    )

    class Meta:
        model = Agent
        # skills and config are here so the instance the model checks (Agent.clean) carries them.
        fields = [
            "name",
            "slug",
            "handler",
            "description",
            "version",
            "visibility",
            "enabled",
            "turn_timeout",
            "skills",
            "config",
        ]
        help_texts = {"slug": "Part of the agent's URL: /a2a/<tenant>/<slug>/. Cannot be changed later."}

    def __init__(self, *args, tenant, **kwargs):
        super().__init__(*args, **kwargs)
        self.tenant = tenant
        if self.instance.pk:
            self.fields["slug"].disabled = True
            self.initial["skills"] = json.dumps(self.instance.skills, indent=2)
            self.initial["config"] = json.dumps(self.instance.config, indent=2)

    def clean_slug(self):
        slug = self.cleaned_data["slug"]
        others = Agent.objects.filter(tenant=self.tenant, slug=slug).exclude(pk=self.instance.pk)
        if not self.instance.pk and others.exists():
            raise forms.ValidationError("This tenant already has an agent with that slug.")
        return slug

    def clean_config(self):
        config = _parse_json(self.cleaned_data["config"].strip() or "{}", "Config")
        if not isinstance(config, dict):
            raise forms.ValidationError('Config must be a JSON object, like {"key": "value"}.')
        return config

    def clean_skills(self):
        skills = _parse_json(self.cleaned_data["skills"].strip() or "[]", "Skills")
        if not isinstance(skills, list) or not all(isinstance(skill, dict) for skill in skills):
            raise forms.ValidationError("Skills must be a JSON list of objects.")
        for number, skill in enumerate(skills, start=1):
            if not skill.get("id") or not skill.get("name"):
                raise forms.ValidationError(f'Skill {number} needs an "id" and a "name".')
        return skills

    def clean(self):
        cleaned = super().clean()
        if self.errors:
            return cleaned
        # The card is what callers read: refuse anything the SDK's AgentCard type rejects.
        probe = Agent(tenant=self.tenant, **{k: v for k, v in cleaned.items() if k != "enabled"})
        try:
            card_dict(probe, settings.PUBLIC_BASE_URL or "http://localhost")
        except (ParseError, TypeError, ValueError) as exc:
            raise forms.ValidationError(f"These values do not make a valid agent card: {exc}") from None
        return cleaned


class ClientForm(forms.Form):
    name = forms.CharField(max_length=255, help_text="Who uses it, e.g. 'billing-service'.")
    scopes = forms.MultipleChoiceField(
        widget=forms.CheckboxSelectMultiple,
        help_text="What tokens of this client may do.",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        scopes = settings.OAUTH2_PROVIDER["SCOPES"]
        self.fields["scopes"].choices = [(name, f"{name}: {text}") for name, text in scopes.items()]
        self.initial.setdefault("scopes", settings.OAUTH2_PROVIDER["DEFAULT_SCOPES"])


def _limit(label: str, most: int, help_text: str) -> forms.IntegerField:
    return forms.IntegerField(label=label, required=False, min_value=1, max_value=most, help_text=help_text)


class TenantSettingsForm(forms.Form):
    """Quotas and retention; an empty field means no limit (tenant_settings_update does the rest)."""

    max_running_turns = _limit(
        "Max running turns",
        MAX_RUNNING_TURNS,
        "Agent turns queued or running at once; more sends are refused (429) until one ends. "
        "Empty: no limit.",
    )
    rate_limit_per_minute = _limit(
        "Rate limit (requests per minute)",
        MAX_RATE_PER_MINUTE,
        "A2A requests per minute from each OAuth client, or each address for anonymous callers "
        "of public agents. Empty: no limit.",
    )
    retention_days = _limit(
        "Retention (days)",
        MAX_RETENTION_DAYS,
        "Finished tasks (completed, failed, canceled, rejected) are deleted this many days after "
        "their last update, with their messages, artifacts, events and deliveries. Empty: keep forever.",
    )
