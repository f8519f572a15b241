import json
import re
from dataclasses import dataclass

from django import forms
from django.conf import settings
from django.utils.text import slugify
from google.protobuf.json_format import ParseError

from a2a_platform.console.config_fields import (
    ConfigField,
    config_fields,
    config_from_values,
    field_name,
    initial_values,
)
from agents.cards import card_dict
from agents.forms import AgentChecksAfterFields
from agents.models import Agent
from agents.registry import (
    ConfigInvalid,
    HandlerInfo,
    HandlerNotAvailable,
    available_handlers,
    handler_choices,
    handler_info,
    validate_handler_config,
)
from tenants.models import MAX_RATE_PER_MINUTE, MAX_RETENTION_DAYS, MAX_RUNNING_TURNS


def suggest_slug(name: str) -> str:
    """A slug from a name, as console agents.js suggests it: lowercase letters, digits and hyphens."""
    return re.sub(r"[^a-z0-9]+", "-", slugify(name)).strip("-")[:50].strip("-")


def _parse_json(value: str, what: str):
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise forms.ValidationError(
            f"{what} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}."
        ) from None
    except RecursionError:
        raise forms.ValidationError(f"{what} is nested too deeply to read.") from None


@dataclass
class HandlerSection:
    """One handler's part of the agent form: what it is, and its config fields (if it has a schema)."""

    name: str
    info: HandlerInfo | None
    fields: list  # BoundFields of its config keys
    # No schema a form can hold (or the handler does not load): its config is edited as JSON.
    raw_only: bool


class AgentForm(AgentChecksAfterFields):
    """Register or edit an agent; its config as fields from the handler's schema, or as raw JSON.

    Every installed handler gets a section of fields (named cfg__<handler>__<key>);
    the page shows the selected handler's (console.js), and on submit only that
    handler's fields count. `config_mode` says whether the fields or the raw JSON
    text are the config. Both are checked by the handler's schema, and a refusal
    is shown on the field of the key at fault.
    """

    CONFIG_MODES = [("fields", "Form fields"), ("raw", "Raw JSON")]

    handler = forms.ChoiceField(
        choices=handler_choices,
        initial="echo",
        help_text="The behaviour this agent runs, from the platform's handler registry.",
    )
    config_mode = forms.ChoiceField(
        choices=CONFIG_MODES,
        initial="fields",
        required=False,
        widget=forms.RadioSelect,
        label="Edit the config as",
    )
    skills = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 6, "spellcheck": "false", "placeholder": "[]"}),
        required=False,
        initial="",
        help_text='A JSON list of skills for the agent card, e.g. [{"id": "summarize", "name": "Summarize", '
        '"description": "Summarizes a text", "tags": ["text"], "examples": ["Summarize this memo"]}]. '
        "Leave empty to use the handler's own skills (listed with the handler above).",
    )
    config = forms.CharField(
        label="Config (JSON)",
        widget=forms.Textarea(attrs={"rows": 6, "spellcheck": "false"}),
        required=False,
        initial="{}",
        help_text="The handler's config as one JSON object; it is checked against the handler's schema.",
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
        widgets = {"description": forms.Textarea(attrs={"rows": 3})}
        help_texts = {
            "slug": "Part of the agent's URL: /a2a/<tenant>/<slug>/. Suggested from the name; "
            "cannot be changed later.",
            "description": "Shown on the agent card. Leave empty to use the handler's description.",
        }

    def __init__(self, *args, tenant, **kwargs):
        super().__init__(*args, **kwargs)
        self.tenant = tenant
        self.fields["slug"].required = False
        self.fields["name"].widget.attrs["data-slug-source"] = "1"
        self.fields["slug"].widget.attrs.update({"data-slug-target": "1", "spellcheck": "false"})
        self._config_fields: dict[str, list[ConfigField] | None] = {}
        for name in available_handlers():
            try:
                fields = config_fields(handler_info(name))
            except HandlerNotAvailable:
                fields = None
            self._config_fields[name] = fields
            for field in fields or []:
                self.fields[field_name(name, field.key)] = field.field
        if self.instance.pk:
            self.fields["slug"].disabled = True
            self.initial["skills"] = (
                json.dumps(self.instance.skills, indent=2) if self.instance.skills else ""
            )
            self.initial["config"] = json.dumps(self.instance.config, indent=2)
            fields = self._config_fields.get(self.instance.handler)
            values = initial_values(fields, self.instance.config) if fields is not None else None
            if values is None:
                # A config the fields cannot show as it is (unknown keys, a legacy row): edit it as JSON.
                self.initial["config_mode"] = "raw"
            else:
                for key, value in values.items():
                    self.initial[field_name(self.instance.handler, key)] = value

    @property
    def handler_sections(self) -> list[HandlerSection]:
        sections = []
        for name, _label in handler_choices():
            try:
                info = handler_info(name)
            except HandlerNotAvailable:
                info = None
            fields = self._config_fields.get(name)
            bound = [self[field_name(name, field.key)] for field in fields or []]
            sections.append(HandlerSection(name=name, info=info, fields=bound, raw_only=fields is None))
        return sections

    def _mode(self) -> str:
        handler = self.data.get("handler") if self.is_bound else self.initial.get("handler")
        if self._config_fields.get(handler) is None:
            return "raw"
        return "raw" if self.data.get("config_mode") == "raw" else "fields"

    def clean_slug(self):
        slug = self.cleaned_data.get("slug") or ""
        if self.instance.pk:
            return self.instance.slug
        if not slug:
            # No script to suggest one: make it from the name, as the page would have.
            slug = suggest_slug(self.data.get("name", ""))
            if not slug:
                raise forms.ValidationError("Give the agent a slug (lowercase letters, digits and hyphens).")
            self.fields["slug"].run_validators(slug)
        if Agent.objects.filter(tenant=self.tenant, slug=slug).exists():
            raise forms.ValidationError("This tenant already has an agent with that slug.")
        return slug

    def clean_config_mode(self):
        return self._mode()

    def clean_config(self):
        if self._mode() != "raw":
            return None  # made from the fields in clean()
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
        handler = cleaned.get("handler")
        if handler and self._mode() == "fields" and "config" not in self.errors:
            self._config_from_fields(handler, cleaned)
        if handler and cleaned.get("config") is not None and not self.errors:
            self._check_config(handler, cleaned["config"])
        if self.errors:
            return cleaned
        # The card is what callers read: refuse anything the SDK's AgentCard type rejects.
        probe = Agent(
            tenant=self.tenant,
            **{k: v for k, v in cleaned.items() if k in self._meta.fields and k != "enabled"},
        )
        try:
            card_dict(probe, settings.PUBLIC_BASE_URL or "http://localhost")
        except (ParseError, TypeError, ValueError) as exc:
            raise forms.ValidationError(f"These values do not make a valid agent card: {exc}") from None
        return cleaned

    def _config_from_fields(self, handler: str, cleaned: dict) -> None:
        fields = self._config_fields[handler]
        values = {}
        for field in fields:
            name = field_name(handler, field.key)
            if name in self.errors:
                return  # a value that is not even of its type: said next to the field
            values[field.key] = cleaned.get(name)
        config, errors = config_from_values(fields, values)
        for key, message in errors.items():
            self.add_error(field_name(handler, key), message)
        if not errors:
            cleaned["config"] = config

    def _check_config(self, handler: str, config: dict) -> None:
        """The handler's schema and rules, with each refusal on the field of its key."""
        if self.instance.pk and (handler, config) == (self.instance.handler, self.instance.config):
            return  # unchanged: a row stored before a rule existed can still be renamed
        try:
            validate_handler_config(handler, config)
        except HandlerNotAvailable as exc:
            self.add_error("handler", str(exc))
        except ConfigInvalid as exc:
            by_key = exc.by_key or {"": str(exc)}
            for key, message in by_key.items():
                name = field_name(handler, key)
                self.add_error(
                    name if self._mode() == "fields" and name in self.fields else "config", message
                )


class AgentImportForm(forms.Form):
    card_url = forms.CharField(
        label="Agent card URL",
        max_length=2000,
        widget=forms.URLInput(
            attrs={
                "placeholder": "https://agents.example.com/.well-known/agent-card.json",
                "spellcheck": "false",
            }
        ),
        help_text="The URL of the remote agent's card (A2A 1.0 or 0.3). The platform fetches it and "
        "shows what it found before anything is created.",
    )
    slug = forms.SlugField(
        max_length=50,
        required=False,
        help_text="The new agent's URL: /a2a/<tenant>/<slug>/. Suggested from the card's name.",
    )
    name = forms.CharField(max_length=200, required=False, help_text="Leave empty to use the card's name.")
    visibility = forms.ChoiceField(
        choices=Agent.Visibility.choices,
        initial=Agent.Visibility.AUTHENTICATED,
        help_text="Authenticated: callers need one of this tenant's OAuth2 tokens to reach the remote agent.",
    )


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
