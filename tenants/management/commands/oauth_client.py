import json

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from tenants.management.commands._util import CLI_ACTOR, tenant_or_error, validation_message
from tenants.services import GRANT_TYPES, oauth_client_create


class Command(BaseCommand):
    help = "Create OAuth2 clients of a tenant. The secret is printed once and stored hashed."

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="Create a client and print its credentials as JSON")
        create.add_argument("--tenant", required=True)
        create.add_argument("--name", default="")
        create.add_argument(
            "--scopes", nargs="+", help="Scopes the client may request (space or comma separated)"
        )
        create.add_argument("--grant", default="client-credentials", choices=list(GRANT_TYPES))
        create.add_argument(
            "--redirect-uri", action="append", default=[], help="For authorization-code clients"
        )

    def handle(self, *args, action, **options):
        tenant = tenant_or_error(options["tenant"])
        scopes = None
        if options["scopes"]:
            scopes = [scope for item in options["scopes"] for scope in item.replace(",", " ").split()]
        try:
            client, secret = oauth_client_create(
                tenant=tenant,
                actor=CLI_ACTOR,
                name=options["name"],
                scopes=scopes,
                grant=options["grant"],
                redirect_uris=" ".join(options["redirect_uri"]),
            )
        except ValidationError as error:
            raise CommandError(validation_message(error)) from None
        # JSON on stdout, nothing else: scripts read it with jq.
        self.stdout.write(json.dumps({"client_id": client.client_id, "client_secret": secret}))
