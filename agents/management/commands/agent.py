import json

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from agents.models import Agent
from agents.registry import available_handlers
from agents.services import agent_register
from tenants.management.commands._util import CLI_ACTOR, tenant_or_error, validation_message


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

    def handle(self, *args, action, **options):
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
            )
        except ValidationError as error:
            raise CommandError(validation_message(error)) from None
        self.stdout.write(
            f"Agent '{agent.slug}' ({agent.visibility}) created at /a2a/{tenant.slug}/{agent.slug}/"
        )
