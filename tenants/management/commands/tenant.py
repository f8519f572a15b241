import getpass
import sys

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from tenants.management.commands._util import CLI_ACTOR, tenant_or_error, validation_message
from tenants.models import Membership
from tenants.services import membership_set, tenant_create


class Command(BaseCommand):
    help = "Create tenants and add members to them."

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="Create a tenant")
        create.add_argument("slug")
        create.add_argument("--name", default="")
        member = actions.add_parser("add-member", help="Add a user to a tenant (creating the user if needed)")
        member.add_argument("slug")
        member.add_argument("username")
        member.add_argument("--role", required=True, choices=Membership.Role.values)
        member.add_argument(
            "--password", help="Password for a new user; prompted for on a terminal if absent"
        )

    def handle(self, *args, action, **options):
        try:
            if action == "create":
                tenant = tenant_create(slug=options["slug"], name=options["name"], actor=CLI_ACTOR)
                self.stdout.write(f"Tenant '{tenant.slug}' created")
            else:
                self._add_member(options["slug"], options["username"], options["role"], options["password"])
        except ValidationError as error:
            raise CommandError(validation_message(error)) from None

    def _add_member(self, slug: str, username: str, role: str, password: str | None) -> None:
        tenant = tenant_or_error(slug)
        User = get_user_model()
        user = User.objects.filter(username=username).first()
        created = user is None
        if created:
            password = password if password is not None else self._prompt_password()
            validate_password(password)
        with transaction.atomic():
            if created:
                user = User.objects.create_user(username=username, password=password)
            membership_set(tenant=tenant, user=user, role=role, actor=CLI_ACTOR)
        state = "created and added" if created else "added"
        self.stdout.write(f"User '{username}' {state} to '{tenant.slug}' as {role}")

    def _prompt_password(self) -> str:
        if not sys.stdin.isatty():
            raise CommandError("The user does not exist: give --password, or run on a terminal to be asked")
        password = getpass.getpass("Password: ")
        if password != getpass.getpass("Password (again): "):
            raise CommandError("The passwords do not match")
        return password
