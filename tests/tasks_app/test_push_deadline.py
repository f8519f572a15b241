"""A webhook receiver gets PUSH_TIMEOUT for its whole answer, not for each byte of it.

httpx's timeout is per operation: a receiver that sent its status line a byte
at a time held the worker thread as long as it liked, past the attempt's
lease, after which the sweep sent the event again.
"""

import socket
import threading
import time

import httpx
import pytest
from django.test import override_settings

from tasks_app import engine
from tasks_app.push import _send


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
    with override_settings(PUSH_TIMEOUT=1.0):
        with pytest.raises(TimeoutError):
            engine.run(_send(httpx.URL(dripping_receiver), {}, b"{}", {}))
    # Each byte came well within the timeout; the whole answer did not.
    assert time.monotonic() - started < 3
