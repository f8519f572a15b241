"""A webhook whose host name gets no answer from DNS fails its attempt within PUSH_TIMEOUT.

The delivery resolves the host just before the POST. A lookup without a
deadline held the worker thread for as long as the DNS server stayed silent:
past PUSH_TIMEOUT and the attempt's lease, after which the sweep sent the event
again. Delivered here, in this process, so the lookup goes to a silent DNS
server on loopback (tests/dns_server.py).
"""

import time
import uuid

from django.test import override_settings

from tasks_app.models import PushConfig, PushDelivery, Task, TaskEvent
from tasks_app.push import push_deliver
from tests import dns_server
from tests.conftest import user_message
from tests.dns_server import finishes_within

silent_dns = dns_server.silent_dns


def test_a_webhook_host_that_dns_never_answers_fails_the_attempt_in_time(rpc, stored, silent_dns):
    sent = rpc("SendMessage", user_message("hi", f"silent-{uuid.uuid4()}"))["result"]["task"]
    task = Task.objects.get(pk=sent["id"])
    event = TaskEvent.objects.filter(task=task).order_by("seq").first()
    config = PushConfig.objects.create(
        tenant_id=task.tenant_id, task=task, config_id="silent", url="https://hooks.silent.test/a2a"
    )
    try:
        delivery = PushDelivery.objects.create(config=config, event=event, seq=event.seq)
        started = time.monotonic()
        # One attempt only: a retry would be a Celery job, resolving the name outside this process.
        with override_settings(PUSH_TIMEOUT=1.0, PUSH_MAX_ATTEMPTS=1):
            assert finishes_within(10, push_deliver, config.pk, event.seq) == 1
        assert time.monotonic() - started < 3
        assert silent_dns.wait_for_queries(1) == ["hooks.silent.test"]
        delivery.refresh_from_db()
        assert delivery.status == PushDelivery.Status.GIVEN_UP
        assert delivery.response_code is None
        assert delivery.error == "URL refused: the host 'hooks.silent.test' did not resolve within 1 s"
    finally:
        config.delete()
