"""The list pages load in a fixed number of queries, however many tasks there are.

Measured with Django's test client inside the test process, on the same
database the live server uses.
"""

import uuid

from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.models import Agent
from tasks_app.models import Context, Message, Task, TaskState
from tenants.models import Membership, Tenant
from tests.console.conftest import orm
from tests.live import ROOT

PAGES = [
    "/console/t/initech/",
    "/console/t/initech/tasks/",
    "/console/t/initech/tasks/?state=input-required&q=question",
    "/console/t/initech/queues/input-required/",
    "/console/t/initech/queues/auth-required/",
    "/console/t/initech/agents/",
]
# Session, user, membership, tenant list, queue sizes, then the page's own few.
MAX_QUERIES = 12


def _add_tasks(tenant: Tenant, count: int) -> None:
    agents = [
        Agent.objects.get_or_create(
            tenant=tenant, slug=f"bulk-{n}", defaults={"name": f"Bulk {n}", "handler": "echo"}
        )[0]
        for n in range(3)
    ]
    states = [TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED, TaskState.COMPLETED, TaskState.FAILED]
    for n in range(count):
        context = Context.objects.create(tenant=tenant, context_id=str(uuid.uuid4()))
        task = Task.objects.create(
            tenant=tenant,
            agent=agents[n % 3],
            context=context,
            state=states[n % 4],
            status_timestamp=timezone.now(),
        )
        Message.objects.create(
            tenant=tenant,
            task=task,
            context=context,
            message_id=f"u-{uuid.uuid4()}",
            role="user",
            parts=[{"text": f"request {n}"}],
        )
        task.status_message = Message.objects.create(
            tenant=tenant,
            task=task,
            context=context,
            message_id=f"a-{uuid.uuid4()}",
            role="agent",
            parts=[{"text": f"A question for you, number {n}"}],
        )
        task.save(update_fields=["status_message"])


def _measure() -> dict[str, int]:
    client = Client()
    client.force_login(get_user_model().objects.get(username="ian"))
    counts = {}
    for page in PAGES:
        with CaptureQueriesContext(connection) as queries:
            response = client.get(page)
        assert response.status_code == 200, page
        counts[page] = len(queries)
    return counts


def _setup() -> Tenant:
    tenant, _ = Tenant.objects.get_or_create(slug="initech", defaults={"name": "Initech"})
    user, _ = get_user_model().objects.get_or_create(username="ian")
    Membership.objects.update_or_create(user=user, tenant=tenant, defaults={"role": Membership.Role.OWNER})
    Task.objects.filter(tenant=tenant).delete()
    return tenant


def test_list_pages_do_not_query_per_task(stored):
    tenant = orm(_setup)
    orm(_add_tasks, tenant, 8)
    few = orm(_measure)
    orm(_add_tasks, tenant, 120)
    many = orm(_measure)
    # 128 tasks: more than two pages of the list and of each queue.
    assert many == few, {page: (few[page], many[page]) for page in PAGES}
    assert max(many.values()) <= MAX_QUERIES, many
    with (ROOT / "test-artifacts" / "console-query-counts.txt").open("w") as log:
        for page, count in many.items():
            log.write(f"{count:3d} queries  {page}  (128 tasks)\n")
