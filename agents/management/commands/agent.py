import json

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from agents.access import get_agent_for_tenant
from agents.models import Agent
from agents.registry import HandlerNotAvailable, available_handlers, expected_text, handler_info
from agents.services import agent_register, agent_update
from tenants.management.commands._util import CLI_ACTOR, tenant_or_error, validation_message

TURN_TIMEOUT_HELP = "Seconds one turn may run before it is stopped and its task fails (default 600)"


class Command(BaseCommand):
    help = "Register agents: bind a handler from the registry to a tenant."

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="Create an agent")
        create.add_argument("--tenant", required=True)
        create.add_argument("--slug", required=True)
        # Only registry names: a dotted path given here is never imported.
        create.add_argument(
            "--handler", required=True, help=f"One of: {', '.join(sorted(available_handlers()))}"
        )
        create.add_argument("--name", default="")
        create.add_argument("--description", default="")
        create.add_argument("--authenticated", action="store_true", help="Require an OAuth2 bearer token")
        create.add_argument(
            "--config",
            default="{}",
            help='The handler\'s config, a JSON object (a2a_proxy needs one with a "url")',
        )
        create.add_argument("--turn-timeout", type=int, default=None, help=TURN_TIMEOUT_HELP)
        update = actions.add_parser("update", help="Change an agent")
        update.add_argument("--tenant", required=True)
        update.add_argument("--slug", required=True)
        update.add_argument("--name")
        update.add_argument("--description")
        update.add_argument("--config", help="The handler's new config, a JSON object")
        update.add_argument("--turn-timeout", type=int, help=TURN_TIMEOUT_HELP)
        enabled = update.add_mutually_exclusive_group()
        enabled.add_argument("--enable", dest="enabled", action="store_true", default=None)
        enabled.add_argument("--disable", dest="enabled", action="store_false")
        actions.add_parser("handlers", help="List the handlers and the config each one takes")

    def handle(self, *args, action, **options):
        if action == "update":
            return self._update(options)
        if action == "handlers":
            return self._handlers()
        tenant = tenant_or_error(options["tenant"])
        visibility = Agent.Visibility.AUTHENTICATED if options["authenticated"] else Agent.Visibility.PUBLIC
        try:
            config = json.loads(options["config"])
        except json.JSONDecodeError as exc:
            raise CommandError(f"--config is not valid JSON: {exc}") from None
        try:
            agent = agent_register(
                tenant=tenant,
                actor=CLI_ACTOR,
                slug=options["slug"],
                handler=options["handler"],
                name=options["name"],
                description=options["description"],
                visibility=visibility,
                config=config,
                **({"turn_timeout": options["turn_timeout"]} if options["turn_timeout"] is not None else {}),
            )
        except ValidationError as error:
            raise CommandError(validation_message(error)) from None
        self.stdout.write(
            f"Agent '{agent.slug}' ({agent.visibility}) created at /a2a/{tenant.slug}/{agent.slug}/"
        )

    def _handlers(self) -> None:
        for name in sorted(available_handlers()):
            try:
                info = handler_info(name)
            except HandlerNotAvailable as exc:
                self.stdout.write(f"{name}: {exc}")
                continue
            self.stdout.write(f"{name}: {info.title}. {info.description}")
            if info.config_schema is None:
                self.stdout.write("  config: any JSON object")
                continue
            properties = info.config_schema.get("properties", {})
            required = set(info.config_schema.get("required", []))
            if not properties:
                self.stdout.write("  config: none ({})")
            for key, prop in properties.items():
                default = f", default {json.dumps(prop['default'])}" if "default" in prop else ""
                need = "required, " if key in required else ""
                self.stdout.write(f"  config.{key}: {need}{expected_text(prop)}{default}")

    def _update(self, options) -> None:
        tenant = tenant_or_error(options["tenant"])
        agent = get_agent_for_tenant(tenant, options["slug"])
        if agent is None:
            raise CommandError(f"No agent '{options['slug']}' in tenant '{tenant.slug}'")
        fields = {
            name: options[name]
            for name in ("name", "description", "turn_timeout", "enabled")
            if options[name] is not None
        }
        if options["config"] is not None:
            try:
                fields["config"] = json.loads(options["config"])
            except json.JSONDecodeError as exc:
                raise CommandError(f"--config is not valid JSON: {exc}") from None
        if not fields:
            raise CommandError("Nothing to change: name at least one of the options")
        try:
            agent_update(agent=agent, actor=CLI_ACTOR, **fields)
        except ValidationError as error:
            raise CommandError(validation_message(error)) from None
        self.stdout.write(f"Agent '{agent.slug}' updated: {', '.join(sorted(fields))}")
