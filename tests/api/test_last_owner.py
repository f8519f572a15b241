"""A tenant keeps at least one owner, also when two owners demote or remove each other at once."""

import threading
import uuid

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import connection

from tenants import services
from tenants.models import Membership, Tenant
from tests.conftest import SERVICES_MODE, slowed


def _two_owners() -> tuple[Tenant, list]:
    tenant = Tenant.objects.create(slug=f"owners-{uuid.uuid4().hex[:8]}", name="Two owners")
    users = [get_user_model().objects.create(username=f"owner-{uuid.uuid4().hex[:8]}") for _ in range(2)]
    for user in users:
        Membership.objects.create(tenant=tenant, user=user, role=Membership.Role.OWNER)
    return tenant, users


def _at_once(calls) -> list:
    """Run each call on a thread (a connection) of its own, at the same time; what each raised."""
    errors = [None] * len(calls)

    def run(index, call):
        try:
            call()
        except ValidationError as exc:
            errors[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, call)) for i, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return errors


@pytest.mark.skipif(not SERVICES_MODE, reason="SQLite runs one writing transaction at a time")
@pytest.mark.parametrize("change", ["demote", "remove"])
def test_two_owners_taking_each_other_out_at_once_leave_one(stored, monkeypatch, change):
    tenant, users = _two_owners()
    # Both transactions count before either changes anything, if nothing queues them.
    slowed(monkeypatch, services, "_owner_count")
    if change == "demote":
        calls = [
            lambda user=user: services.membership_set(
                tenant=tenant, user=user, role=Membership.Role.OPERATOR, actor="test"
            )
            for user in users
        ]
    else:
        memberships = list(Membership.objects.filter(tenant=tenant))
        calls = [
            lambda membership=membership: services.membership_remove(membership=membership, actor="test")
            for membership in memberships
        ]

    errors = _at_once(calls)

    assert Membership.objects.filter(tenant=tenant, role=Membership.Role.OWNER).count() == 1
    assert sum(error is not None for error in errors) == 1, errors
