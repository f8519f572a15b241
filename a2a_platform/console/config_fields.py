"""A handler's config schema (JSON Schema from its pydantic model) as console form fields.

Each property of a kind a form can hold becomes a Django field: string, integer,
number, boolean, enum, list of strings (one a line) and object of strings
("Name: value" lines). A schema with any other property is edited as raw JSON
only. Types are parsed here; ranges, required keys and unknown keys are judged
by the handler's schema (agents/registry.py), the same check as every write path.
"""

import json
from dataclasses import dataclass

from django import forms

from agents.registry import HandlerInfo

LINES = {"rows": 3, "spellcheck": "false"}


def field_name(handler: str, key: str) -> str:
    return f"cfg__{handler}__{key}"


@dataclass
class ConfigField:
    key: str
    kind: str  # string, integer, number, boolean, enum, lines, pairs
    prop: dict
    field: forms.Field


def _resolve(prop: dict, schema: dict) -> dict:
    ref = prop.get("$ref", "")
    if ref.startswith("#/$defs/"):
        return {**schema.get("$defs", {}).get(ref.removeprefix("#/$defs/"), {}), **prop}
    return prop


def _kind(prop: dict) -> str | None:
    kind = prop.get("type")
    if "enum" in prop:
        return "enum"
    if kind in ("string", "integer", "number", "boolean"):
        return kind
    if kind == "array" and prop.get("items", {}).get("type") == "string":
        return "lines"
    if kind == "object" and prop.get("additionalProperties", {}) == {"type": "string"}:
        return "pairs"
    return None


def _example(prop: dict) -> str:
    examples = prop.get("examples") or []
    if not examples:
        return ""
    example = examples[0]
    if isinstance(example, dict):
        return "\n".join(f"{name}: {value}" for name, value in example.items())
    if isinstance(example, list):
        return "\n".join(str(item) for item in example)
    return str(example)


def config_fields(info: HandlerInfo) -> list[ConfigField] | None:
    """The form fields of the handler's config, or None when it must be edited as JSON."""
    schema = info.config_schema
    if schema is None:
        return None
    required = set(schema.get("required", []))
    fields = []
    for key, raw in schema.get("properties", {}).items():
        prop = _resolve(raw, schema)
        kind = _kind(prop)
        if kind is None:
            return None
        fields.append(
            ConfigField(key=key, kind=kind, prop=prop, field=_form_field(key, kind, prop, required))
        )
    return fields


def _form_field(key: str, kind: str, prop: dict, required: set) -> forms.Field:
    label = prop.get("title") or key
    if prop.get("unit"):
        label += f" ({prop['unit']})"
    help_text = prop.get("description", "")
    default = prop.get("default")
    if default not in (None, "", [], {}) and kind not in ("boolean", "enum"):
        help_text += f" Default: {json.dumps(default) if kind in ('lines', 'pairs') else _plain(default)}."
    if key in required:
        help_text = f"Required. {help_text}"
    attrs = {"data-config-key": key, "data-config-kind": kind}
    example = _example(prop)
    if example and kind != "boolean":
        attrs["placeholder"] = f"e.g. {example}" if kind in ("string", "integer", "number") else example
    common = {"label": label, "help_text": help_text.strip(), "required": False}
    if kind == "boolean":
        return forms.BooleanField(widget=forms.CheckboxInput(attrs=attrs), initial=bool(default), **common)
    if kind == "enum":
        empty = f"Default ({_plain(default)})" if default is not None else "—"
        choices = [("", empty)] + [(json.dumps(value), _plain(value)) for value in prop["enum"]]
        return forms.ChoiceField(choices=choices, widget=forms.Select(attrs=attrs), **common)
    if kind in ("integer", "number"):
        for bound, attr in (("minimum", "min"), ("maximum", "max")):
            if bound in prop:
                attrs[attr] = prop[bound]
        attrs["step"] = "1" if kind == "integer" else "any"
        field = forms.IntegerField if kind == "integer" else forms.FloatField
        return field(widget=forms.NumberInput(attrs=attrs), **common)
    if kind in ("lines", "pairs"):
        return forms.CharField(widget=forms.Textarea(attrs={**attrs, **LINES}), strip=False, **common)
    widget = forms.URLInput if prop.get("format") == "uri" else forms.TextInput
    return forms.CharField(widget=widget(attrs={**attrs, "spellcheck": "false"}), **common)


def _plain(value) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return value if isinstance(value, str) else json.dumps(value)


def initial_values(fields: list[ConfigField], config: dict) -> dict[str, object] | None:
    """Form values showing `config`, or None when it holds what the fields cannot (unknown keys)."""
    known = {field.key: field for field in fields}
    if not isinstance(config, dict) or set(config) - set(known):
        return None
    values = {}
    for key, value in config.items():
        kind = known[key].kind
        if kind == "lines" and isinstance(value, list):
            values[key] = "\n".join(str(item) for item in value)
        elif kind == "pairs" and isinstance(value, dict):
            values[key] = "\n".join(f"{name}: {text}" for name, text in value.items())
        elif kind == "enum":
            values[key] = json.dumps(value)
        elif kind in ("lines", "pairs"):
            return None
        else:
            values[key] = value
    return values


def config_from_values(fields: list[ConfigField], cleaned: dict) -> tuple[dict, dict[str, str]]:
    """The config the filled-in fields make, and field errors by key. Empty fields are left out
    (the handler's default applies); a checkbox is written when it differs from its default."""
    config, errors = {}, {}
    for field in fields:
        value = cleaned.get(field.key)
        if field.kind == "boolean":
            if value != bool(field.prop.get("default", False)) or "default" not in field.prop:
                config[field.key] = bool(value)
        elif value in (None, ""):
            continue
        elif field.kind == "enum":
            config[field.key] = json.loads(value)
        elif field.kind == "number":
            config[field.key] = int(value) if float(value).is_integer() and abs(value) < 2**53 else value
        elif field.kind == "lines":
            items = [line.strip() for line in value.splitlines() if line.strip()]
            if items:
                config[field.key] = items
        elif field.kind == "pairs":
            pairs = {}
            for line in (line for line in value.splitlines() if line.strip()):
                name, colon, text = line.partition(":")
                if not colon or not name.strip():
                    errors[field.key] = f"Write one 'Name: value' per line; this line has no name: {line!r}."
                    break
                pairs[name.strip()] = text.strip()
            if pairs:
                config[field.key] = pairs
        elif field.kind == "string":
            config[field.key] = value.strip()
        else:
            config[field.key] = value
    return config, errors
