"""max_running_turns is exact: sends of one tenant arriving at once never start more turns than it allows.

The sends go through the ASGI application in this process (JSON-RPC and REST
at once), each on a database thread and a PostgreSQL connection of its own.
The running turns are counted slowly, so every send's first look sees the
tenant empty: only the count in the transaction that stores the send, behind
the lock on the tenant's row, keeps the limit.
"""

import asyncio

import httpx
import pytest

from tasks_app import quotas
from tasks_app.models import Message, Task
from tenants.models import Tenant
from tests.api.tenancy import new_message
from tests.conftest import SERVICES_MODE, slowed
from tests.live import TEST_QUEUE
from tests.tasks_app.test_quotas import make_tenant

pytestmark = pytest.mark.skipif(
    not SERVICES_MODE, reason="PostgreSQL: SQLite runs one writing transaction at a time"
)

SENDS = 8


@pytest.fixture
def in_process():
    """The ASGI app in this process; its turns go to this session's worker, never to a shared queue."""
    from a2a_platform.asgi import application
    from a2a_platform.celery import app as celery_app

    queue = celery_app.conf.task_default_queue
    celery_app.conf.task_default_queue = TEST_QUEUE
    yield httpx.AsyncClient(transport=httpx.ASGITransport(app=application), base_url="http://127.0.0.1")
    celery_app.conf.task_default_queue = queue


def _send(client: httpx.AsyncClient, tenant: Tenant, rest: bool):
    body = new_message("at once") | {"configuration": {"returnImmediately": True}}
    headers = {"A2A-Version": "1.0"}
    if rest:
        return client.post(f"/a2a/{tenant.slug}/slow/rest/message:send", json=body, headers=headers)
    rpc = {"jsonrpc": "2.0", "id": "at-once", "method": "SendMessage", "params": body}
    return client.post(f"/a2a/{tenant.slug}/slow/", json=rpc, headers=headers)


@pytest.mark.parametrize("most", [1, 3])
async def test_sends_arriving_at_once_start_no_more_turns_than_the_limit(
    server, stored, in_process, monkeypatch, most
):
    from asgiref.sync import sync_to_async

    # Its turns stay open for the whole test: none ends and frees a slot meanwhile.
    tenant = await sync_to_async(make_tenant)(slow_seconds=20, max_running_turns=most)
    # Every send reads the count before any has stored its message, if nothing queues them.
    slowed(monkeypatch, quotas, "running_turns")
    async with in_process as client:
        answers = await asyncio.gather(*(_send(client, tenant, rest=i % 2 == 1) for i in range(SENDS)))
        # The sleepers would hold the session worker's threads for 20 s: canceled, they stop now.
        for answer in answers:
            if answer.status_code == 200:
                task_id = answer.json().get("result", answer.json())["task"]["id"]
                canceled = await client.post(
                    f"/a2a/{tenant.slug}/slow/rest/tasks/{task_id}:cancel", headers={"A2A-Version": "1.0"}
                )
                assert canceled.status_code == 200, canceled.text

    accepted = [answer for answer in answers if answer.status_code == 200]
    refused = [answer for answer in answers if answer.status_code != 200]
    assert len(accepted) == most, [answer.text for answer in answers]
    # The same refusal as when the count was full before the request came, on each binding.
    kinds = set()
    for answer in refused:
        assert answer.status_code == 429, answer.text
        assert answer.headers["Retry-After"] == "5"
        error = answer.json()["error"]
        kinds.add("rest" if "status" in error else "jsonrpc")
        if "status" in error:
            assert error["status"] == "RESOURCE_EXHAUSTED"
            assert error["details"][0]["reason"] == "RUNNING_TURNS_EXCEEDED"
        else:
            assert error["code"] == -32029
            assert error["data"] == {"retryAfter": 5, "reason": "RUNNING_TURNS_EXCEEDED", "limit": most}
    assert kinds == {"rest", "jsonrpc"}
    # Refused sends left nothing behind.
    assert await sync_to_async(Task.objects.filter(tenant=tenant).count)() == most
    assert await sync_to_async(Message.objects.filter(tenant=tenant, role=Message.Role.USER).count)() == most
