"""Handler registry: the names an Agent row may use, and the executors behind them.

Three sources, in order: the built-ins below, every handler an installed
package declares in the `a2a_platform.handlers` entry-point group, and the
`name=dotted.path` pairs in settings.A2A_EXTRA_HANDLERS. Only these names can
be chosen in forms; a dotted path typed by a user is never imported.

A handler may check an agent's config before it is stored: a classmethod or
staticmethod `validate_config(config: dict) -> None` on its executor class that
raises ConfigInvalid (or ValueError, or Django's ValidationError) with a
message saying what to change. Handlers without one accept any JSON object.
"""

import inspect
from functools import cache
from importlib import import_module
from importlib.metadata import entry_points

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
    """An agent config its handler cannot run with; the message says what to change."""


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
    return [(name, name) for name in sorted(available_handlers())]


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


def validate_handler_config(name: str, config) -> None:
    """Check `config` against handler `name` without running or instantiating the handler.

    Raises HandlerNotAvailable when the name is not installed or does not load,
    ConfigInvalid when the config is not a JSON object or the handler's
    `validate_config` refuses it.
    """
    handler = load_handler(name)
    if not isinstance(config, dict):
        raise ConfigInvalid("config must be a JSON object")
    # Only a class or static method: calling anything else would need an instance.
    if not isinstance(inspect.getattr_static(handler, "validate_config", None), (classmethod, staticmethod)):
        return
    try:
        handler.validate_config(config)
    except ConfigInvalid:
        raise
    except ValidationError as exc:
        raise ConfigInvalid(" ".join(exc.messages) or f"Handler '{name}' refused this config") from exc
    except (ValueError, TypeError) as exc:
        raise ConfigInvalid(str(exc) or f"Handler '{name}' refused this config") from exc


def build_executor(agent) -> AgentExecutor:
    """A fresh executor for one turn. Executors that accept `config` get the agent's."""
    handler = load_handler(agent.handler)
    if "config" in inspect.signature(handler).parameters:
        return handler(config=agent.config)
    return handler()


def handler_defaults(name: str) -> dict:
    """Description and skills a handler suggests for new agents and empty cards."""
    try:
        handler = load_handler(name)
    except HandlerNotAvailable:
        return {"description": "", "skills": []}
    return {
        "description": getattr(handler, "default_description", ""),
        "skills": list(getattr(handler, "default_skills", [])),
    }
