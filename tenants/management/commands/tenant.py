import argparse
import getpass
import re
import sys

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from tenants.management.commands._util import CLI_ACTOR, tenant_or_error, validation_message
from tenants.models import Membership
from tenants.services import UNCHANGED, membership_set, tenant_create, tenant_settings_update

NO_LIMIT = {"none", "unlimited", "off"}


def limit(value: str) -> int | None:
    """A positive whole number, or none/unlimited/off for no limit."""
    if value.strip().lower() in NO_LIMIT:
        return None
    if not re.fullmatch(r"[0-9]+", value.strip()) or int(value) < 1:
        raise argparse.ArgumentTypeError(f"'{value}' is not a positive whole number (or 'none')")
    return int(value)


def rate(value: str) -> int | None:
    """Requests per minute: N/m, N/min or N; none for no limit."""
    found = re.fullmatch(r"\s*([0-9]+)\s*(?:/\s*(?:m|min|minute))?\s*", value)
    if value.strip().lower() in NO_LIMIT:
        return None
    if not found or int(found.group(1)) < 1:
        raise argparse.ArgumentTypeError(f"'{value}' is not a rate like 60/m (or 'none')")
    return int(found.group(1))


class Command(BaseCommand):
    help = "Create tenants, add members to them, and change their quotas and retention."

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
        update = actions.add_parser("update", help="Change a tenant's name, quotas or retention (audited)")
        update.add_argument("slug")
        update.add_argument("--name")
        update.add_argument(
            "--max-running-turns",
            type=limit,
            default=UNCHANGED,
            help="Turns queued or running at once, or none",
        )
        update.add_argument(
            "--rate-limit",
            type=rate,
            default=UNCHANGED,
            help="Requests per minute per client, e.g. 60/m, or none",
        )
        update.add_argument(
            "--retention-days", type=limit, default=UNCHANGED, help="Days finished tasks are kept, or none"
        )

    def handle(self, *args, action, **options):
        try:
            if action == "create":
                tenant = tenant_create(slug=options["slug"], name=options["name"], actor=CLI_ACTOR)
                self.stdout.write(f"Tenant '{tenant.slug}' created")
            elif action == "update":
                self._update(options)
            else:
                self._add_member(options["slug"], options["username"], options["role"], options["password"])
        except ValidationError as error:
            raise CommandError(validation_message(error)) from None

    def _update(self, options) -> None:
        tenant = tenant_or_error(options["slug"])
        tenant = tenant_settings_update(
            tenant=tenant,
            actor=CLI_ACTOR,
            name=UNCHANGED if options["name"] is None else options["name"],
            max_running_turns=options["max_running_turns"],
            rate_limit_per_minute=options["rate_limit"],
            retention_days=options["retention_days"],
        )

        def shown(value, unit=""):
            return "no limit" if value is None else f"{value}{unit}"

        self.stdout.write(
            f"Tenant '{tenant.slug}': max running turns {shown(tenant.max_running_turns)}, "
            f"rate limit {shown(tenant.rate_limit_per_minute, '/m')}, "
            f"retention {shown(tenant.retention_days, ' days') if tenant.retention_days else 'forever'}"
        )

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
