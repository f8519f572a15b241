import pytest

from tests.tasks_app.webhooks import Receiver


@pytest.fixture
def receiver():
    receiver = Receiver()
    receiver.thread.start()
    yield receiver
    receiver.server.shutdown()
    receiver.server.server_close()
    receiver.thread.join(timeout=5)
