import json

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from tenants.management.commands._util import CLI_ACTOR, tenant_or_error, validation_message
from tenants.models import Application
from tenants.services import GRANT_TYPES, oauth_client_create, oauth_client_rotate_secret


class Command(BaseCommand):
    help = (
        "Create OAuth2 clients of a tenant, or give one a new secret. "
        "The secret is printed once and stored hashed."
    )

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

        rotate = actions.add_parser(
            "rotate-secret",
            help="Give a client a new secret (the old one and its tokens stop working); print it as JSON",
        )
        rotate.add_argument("--tenant", required=True)
        which = rotate.add_mutually_exclusive_group(required=True)
        which.add_argument("--client-id")
        which.add_argument("--name", help="The client's name, e.g. 'Demo client'")

    def handle(self, *args, action, **options):
        tenant = tenant_or_error(options["tenant"])
        if action == "rotate-secret":
            return self._rotate(tenant, options["client_id"], options["name"])
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

    def _rotate(self, tenant, client_id: str | None, name: str | None) -> None:
        clients = Application.objects.filter(tenant=tenant, revoked_at__isnull=True)
        clients = clients.filter(client_id=client_id) if client_id else clients.filter(name=name)
        found = list(clients[:2])
        if not found:
            raise CommandError(f"Tenant '{tenant.slug}' has no active client {client_id or repr(name)}")
        if len(found) > 1:
            raise CommandError(f"Tenant '{tenant.slug}' has several clients named {name!r}: use --client-id")
        try:
            secret = oauth_client_rotate_secret(client=found[0], actor=CLI_ACTOR)
        except ValidationError as error:
            raise CommandError(validation_message(error)) from None
        self.stdout.write(json.dumps({"client_id": found[0].client_id, "client_secret": secret}))
