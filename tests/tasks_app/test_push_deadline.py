"""A webhook attempt gets PUSH_TIMEOUT in all: for its host's lookup and the receiver's whole answer.

httpx's timeout is per operation: a receiver that sent its status line a byte
at a time held the worker thread as long as it liked, past the attempt's
lease, after which the sweep sent the event again. A slow lookup before it
must not add a PUSH_TIMEOUT of its own.
"""

import socket
import threading
import time
import uuid

import httpx
import pytest
from django.test import override_settings

from agents import outbound
from agents.outbound import url_check
from tasks_app import engine
from tasks_app.models import PushConfig, PushDelivery, Task, TaskEvent
from tasks_app.push import _send, push_deliver
from tests.conftest import user_message
from tests.dns_server import finishes_within


@pytest.fixture
def dripping_receiver():
    """A loopback server that answers any request one byte every 0.2 s, for up to 20 s."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            with connection:
                connection.recv(65536)
                for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n":
                    if stop.wait(0.2):
                        break
                    try:
                        connection.sendall(bytes([byte]))
                    except OSError:
                        break

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/hook"
    stop.set()
    thread.join(5)
    listener.close()


def test_a_receiver_that_answers_a_byte_at_a_time_runs_out_of_time(dripping_receiver):
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        engine.run(_send(url_check(dripping_receiver, allow_private=True), {}, b"{}", 1.0))
    # Each byte came well within the timeout; the whole answer did not.
    assert time.monotonic() - started < 3


def test_a_slow_lookup_leaves_the_receiver_only_what_is_left_of_the_attempt(
    rpc, stored, dripping_receiver, monkeypatch
):
    def slow_lookup(host, port, *args, **kwargs):
        time.sleep(0.8)  # a DNS server that answers late, within the attempt's time
        return socket.getaddrinfo("127.0.0.1", port, *args, **kwargs)

    monkeypatch.setattr(outbound, "getaddrinfo", slow_lookup)
    sent = rpc("SendMessage", user_message("hi", f"late-dns-{uuid.uuid4()}"))["result"]["task"]
    task = Task.objects.get(pk=sent["id"])
    event = TaskEvent.objects.filter(task=task).order_by("seq").first()
    port = httpx.URL(dripping_receiver).port
    config = PushConfig.objects.create(
        tenant_id=task.tenant_id, task=task, config_id="late", url=f"http://hooks.late.test:{port}/hook"
    )
    try:
        delivery = PushDelivery.objects.create(config=config, event=event, seq=event.seq)
        started = time.monotonic()
        with override_settings(PUSH_TIMEOUT=1.0, PUSH_MAX_ATTEMPTS=1, PUSH_ALLOW_PRIVATE_NETWORKS=True):
            assert finishes_within(10, push_deliver, config.pk, event.seq) == 1
        # 0.8 s looking up, 0.2 s for the receiver: not 0.8 + 1.0 (1.8 s and more).
        assert time.monotonic() - started < 1.65
        delivery.refresh_from_db()
        assert delivery.status == PushDelivery.Status.GIVEN_UP
        assert delivery.error == "No answer within 1 s"
    finally:
        config.delete()
