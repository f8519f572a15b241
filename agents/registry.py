"""Handler registry: the names an Agent row may use, and the executors behind them.

Three sources, in order: the built-ins below, every handler an installed
package declares in the `a2a_platform.handlers` entry-point group, and the
`name=dotted.path` pairs in settings.A2A_EXTRA_HANDLERS. Only these names can
be chosen in forms; a dotted path typed by a user is never imported.

The handler contract: an a2a-sdk AgentExecutor subclass that may describe
itself with class attributes, the same for built-ins and entry-point handlers:

- `title` (str): what people call it ("Echo"); the registry name otherwise.
- `description` (str): one or two sentences on what it does.
- `config_model`: a pydantic BaseModel subclass, the schema of the agent's
  config. Its `model_json_schema()` drives the console form and the API's
  handler list; `model_validate()` checks every config before it is stored
  (declare `model_config = ConfigDict(extra="forbid", strict=True)` so unknown
  keys and "3" for a number are refused). A field may carry
  `json_schema_extra={"unit": "seconds"}` for messages and forms.
- `default_skills` (list of AgentSkill dicts): the card's skills when the
  agent lists none.
- `validate_config(config)` (classmethod or staticmethod, optional): checks
  the schema cannot express (a URL the platform may not call); it runs after
  the schema passed and raises ConfigInvalid (or ValueError, or Django's
  ValidationError) with a message saying what to change.
- `check_ready(config)` (classmethod or staticmethod, optional): a quick check
  that the agent can serve now (a remote agent answers); agents/health.py
  calls it with a short timeout, never on the request path of a call.
- `answers_with_task` (bool, default False): True when the handler never
  answers a first message with a Message alone (it always works through the
  task). A stream then gets the accepted Task at once, instead of after the
  agent's first event; a handler that says so and sends a Message anyway
  completes its task with that Message.

A handler without `config_model` takes any JSON object as its config.
"""

import inspect
import json
from dataclasses import dataclass, field
from functools import cache
from importlib import import_module
from importlib.metadata import entry_points

import pydantic
from a2a.server.agent_execution import AgentExecutor
from django.conf import settings
from django.core.exceptions import ValidationError

BUILTIN_HANDLERS = {
    "echo": "agents.builtin.echo.EchoAgentExecutor",
    "clarify": "agents.builtin.clarify.ClarifyAgentExecutor",
    "approval": "agents.builtin.approval.ApprovalAgentExecutor",
    "progress": "agents.builtin.progress.ProgressAgentExecutor",
    "a2a_proxy": "agents.builtin.a2a_proxy.A2AProxyAgentExecutor",
}
ENTRY_POINT_GROUP = "a2a_platform.handlers"


class HandlerNotAvailable(Exception):
    pass


class ConfigInvalid(ValueError):
    """An agent config its handler cannot run with; the message says what to change.

    `key` names the config key at fault when there is one, so a form can put the
    message next to that key's field.
    """

    def __init__(self, message: str, key: str = "", by_key: dict[str, str] | None = None):
        super().__init__(message)
        self.key = key
        # Every key at fault and its message (a schema refusal may name several).
        self.by_key = by_key if by_key is not None else ({key: message} if key else {})


# The config schema of a handler that takes no settings: only {} passes.
class NoConfig(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True, title="No settings")


@dataclass(frozen=True)
class HandlerInfo:
    """What a handler says about itself, for forms, the API and new agents."""

    name: str
    title: str
    description: str
    # JSON Schema of the config (an object schema), None when the handler declares none.
    config_schema: dict | None
    default_config: dict = field(default_factory=dict)
    default_skills: list = field(default_factory=list)


@cache
def available_handlers() -> dict[str, str]:
    """Handler name -> dotted path of its AgentExecutor class."""
    handlers = dict(BUILTIN_HANDLERS)
    for entry_point in entry_points(group=ENTRY_POINT_GROUP):
        handlers.setdefault(entry_point.name, entry_point.value.replace(":", "."))
    for item in settings.A2A_EXTRA_HANDLERS:
        name, _, path = item.partition("=")
        if name and path:
            handlers.setdefault(name.strip(), path.strip())
    return handlers


def handler_choices() -> list[tuple[str, str]]:
    """(name, "Title (name)") for every installed handler, echo first: the one to try first."""
    names = sorted(available_handlers(), key=lambda name: (name != "echo", name))
    return [(name, _choice_label(name)) for name in names]


def _choice_label(name: str) -> str:
    try:
        title = handler_info(name).title
    except HandlerNotAvailable:
        return f"{name} (not loadable)"
    return name if title == name else f"{title} ({name})"


@cache
def load_handler(name: str) -> type[AgentExecutor]:
    path = available_handlers().get(name)
    if path is None:
        raise HandlerNotAvailable(f"Handler '{name}' is not installed on this platform")
    module_path, _, class_name = path.rpartition(".")
    try:
        handler = getattr(import_module(module_path), class_name)
    except (ImportError, AttributeError) as exc:
        raise HandlerNotAvailable(f"Handler '{name}' could not be loaded: {exc}") from exc
    if not (inspect.isclass(handler) and issubclass(handler, AgentExecutor)):
        raise HandlerNotAvailable(f"Handler '{name}' is not an a2a-sdk AgentExecutor")
    return handler


def _config_model(handler) -> type[pydantic.BaseModel] | None:
    model = getattr(handler, "config_model", None)
    return model if inspect.isclass(model) and issubclass(model, pydantic.BaseModel) else None


@cache
def handler_info(name: str) -> HandlerInfo:
    """The handler's self-description; raises HandlerNotAvailable like load_handler()."""
    handler = load_handler(name)
    model = _config_model(handler)
    schema = model.model_json_schema() if model is not None else None
    properties = (schema or {}).get("properties", {})
    return HandlerInfo(
        name=name,
        title=getattr(handler, "title", "") or name,
        description=getattr(handler, "description", "") or getattr(handler, "default_description", ""),
        config_schema=schema,
        default_config={key: prop["default"] for key, prop in properties.items() if "default" in prop},
        default_skills=list(getattr(handler, "default_skills", [])),
    )


# What a reader who may not edit an agent sees of a config value its schema marks writeOnly.
HIDDEN = "********"


def config_shown(agent, *, may_edit: bool) -> dict:
    """The agent's config as a reader sees it: whole to one who may edit it, else its secrets hidden.

    A secret is a value whose property the handler's schema marks `writeOnly`
    (the a2a_proxy agent's `headers`, which carry the remote agent's API key):
    a string is replaced by HIDDEN, an object keeps its keys (the header
    names) with each value replaced. A handler that does not load shows none.
    """
    config = agent.config if isinstance(agent.config, dict) else {}
    if may_edit:
        return config
    try:
        properties = (handler_info(agent.handler).config_schema or {}).get("properties", {})
    except HandlerNotAvailable:
        return {}
    shown = dict(config)
    for key, prop in properties.items():
        if prop.get("writeOnly") and key in shown:
            value = shown[key]
            shown[key] = {name: HIDDEN for name in value} if isinstance(value, dict) else HIDDEN
    return shown


def answers_with_task(name: str) -> bool:
    """Whether handler `name` declares answers_with_task (a handler that does not load: no)."""
    try:
        return getattr(load_handler(name), "answers_with_task", False) is True
    except HandlerNotAvailable:
        return False


def _static_hook(handler, name: str):
    # Only a class or static method: calling anything else would need an instance.
    if isinstance(inspect.getattr_static(handler, name, None), (classmethod, staticmethod)):
        return getattr(handler, name)
    return None


def validate_handler_config(name: str, config) -> None:
    """Check `config` against handler `name` without running or instantiating the handler.

    Raises HandlerNotAvailable when the name is not installed or does not load,
    ConfigInvalid when the config is not a JSON object, does not fit the
    handler's schema (unknown keys included), or its `validate_config` refuses it.
    """
    handler = load_handler(name)
    if not isinstance(config, dict):
        raise ConfigInvalid("config must be a JSON object")
    model = _config_model(handler)
    if model is not None:
        try:
            model.model_validate(config)
        except pydantic.ValidationError as exc:
            raise schema_refusal(handler_info(name), config, exc) from None
    check = _static_hook(handler, "validate_config")
    if check is None:
        return
    try:
        check(config)
    except ConfigInvalid:
        raise
    except ValidationError as exc:
        raise ConfigInvalid(" ".join(exc.messages) or f"Handler '{name}' refused this config") from exc
    except (ValueError, TypeError) as exc:
        raise ConfigInvalid(str(exc) or f"Handler '{name}' refused this config") from exc


def handler_check_ready(name: str, config: dict) -> None:
    """Run the handler's own readiness check, if it has one; it raises ConfigInvalid (or
    ValueError / OSError) saying why the agent cannot serve."""
    check = _static_hook(load_handler(name), "check_ready")
    if check is not None:
        check(config)


# --- Messages for schema refusals -------------------------------------------------------
def _shown(value) -> str:
    shown = json.dumps(value, default=str)
    return shown if len(shown) <= 40 else shown[:37] + "..."


def _number(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def expected_text(prop: dict) -> str:
    """What a value of this JSON Schema property must be, in words: 'a number of seconds from 0 to 60'."""
    if "enum" in prop:
        return "one of " + ", ".join(json.dumps(value) for value in prop["enum"])
    kind = prop.get("type")
    if kind in ("number", "integer"):
        noun = "a whole number" if kind == "integer" else "a number"
        if prop.get("unit"):
            noun += f" of {prop['unit']}"
        low, high = prop.get("minimum", prop.get("exclusiveMinimum")), prop.get("maximum")
        if low is not None and high is not None:
            return f"{noun} from {_number(low)} to {_number(high)}"
        if low is not None:
            return f"{noun} of at least {_number(low)}"
        return f"{noun} of at most {_number(high)}" if high is not None else noun
    if kind == "string":
        return "an http(s) URL" if prop.get("format") == "uri" else "a string"
    if kind == "boolean":
        return "true or false"
    if kind == "array":
        return "a list of strings" if prop.get("items", {}).get("type") == "string" else "a list"
    if kind == "object":
        values = prop.get("additionalProperties")
        return "an object of names to strings" if isinstance(values, dict) else "an object"
    return "a valid value"


def schema_refusal(info: HandlerInfo, config: dict, error: pydantic.ValidationError) -> ConfigInvalid:
    """One readable message per key at fault, from pydantic's errors and the handler's schema."""
    properties = (info.config_schema or {}).get("properties", {})
    by_key: dict[str, str] = {}
    for item in error.errors():
        key = str(item["loc"][0]) if item["loc"] else ""
        if key in by_key:
            continue
        prop = properties.get(key, {})
        if item["type"] == "extra_forbidden":
            known = ", ".join(f'"{name}"' for name in properties)
            by_key[key] = (
                f'"{key}" is not a setting of the {info.title} handler; its settings are: {known}.'
                if known
                else f'The {info.title} handler takes no settings: remove "{key}".'
            )
        elif item["type"] == "missing":
            by_key[key] = (
                f'"{key}" is required: {prop["description"]}'
                if prop.get("description")
                else (f'"{key}" is required.')
            )
        elif key:
            by_key[key] = f'"{key}" must be {expected_text(prop)}, not {_shown(config.get(key))}.'
        else:
            by_key[key] = item["msg"]
    return ConfigInvalid(" ".join(by_key.values()), key=next(iter(by_key), ""), by_key=by_key)


def build_executor(agent) -> AgentExecutor:
    """A fresh executor for one turn. Executors that accept `config` get the agent's."""
    handler = load_handler(agent.handler)
    if _takes_config(handler):
        return handler(config=agent.config)
    return handler()


@cache
def _takes_config(handler: type[AgentExecutor]) -> bool:
    # Once per class, not per turn: for a class without an __init__ of its own,
    # inspect.signature parses object.__init__'s text signature every time.
    return "config" in inspect.signature(handler).parameters


def handler_defaults(name: str) -> dict:
    """Description and skills a handler suggests for new agents and empty cards."""
    try:
        info = handler_info(name)
    except HandlerNotAvailable:
        return {"description": "", "skills": []}
    return {"description": info.description, "skills": list(info.default_skills)}
