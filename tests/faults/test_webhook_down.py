"""The webhook receiver goes down mid-task for 6 s: deliveries retry and all arrive once it is back.

Four 3 s progress tasks each push to a path of one receiver on loopback. Once
every path got its first event the receiver stops listening (connection
refused), then listens again on the same port. Each task's webhook must end
up with its whole stored log, each event once and in order.
"""

import json
import os
import threading
import time
import uuid
from http.server import ThreadingHTTPServer

import pytest

from tests.faults.harness import TERMINAL, record, rpc, send_params, wait_for
from tests.tasks_app.webhooks import Receiver, new_path

pytestmark = pytest.mark.skipif(
    not os.environ.get("REDIS_URL"), reason="fault tests run with the services-mode suite (REDIS_URL set)"
)

TASKS = 4
DOWN = 6.0
# Retries 0.5 s, 1 s, then every 2 s: twelve attempts span about 20 s, well past the outage.
PUSH_ENV = {"PUSH_RETRY_BASE_DELAY": "0.5", "PUSH_RETRY_MAX_DELAY": "2", "PUSH_MAX_ATTEMPTS": "12"}


class Webhook:
    """tests/tasks_app/webhooks.Receiver that can stop listening and listen again on its port."""

    def __init__(self):
        self.receiver = Receiver()
        self.port = self.receiver.server.server_address[1]
        self.handler = self.receiver.server.RequestHandlerClass
        self.thread = None
        self.serve(self.receiver.server)

    def serve(self, server) -> None:
        self.receiver.server = server
        self.thread = threading.Thread(target=server.serve_forever, daemon=True)
        self.thread.start()

    def down(self) -> None:
        self.receiver.server.shutdown()
        self.receiver.server.server_close()
        self.thread.join(timeout=5)

    def up(self) -> None:
        server = ThreadingHTTPServer(("127.0.0.1", self.port), self.handler)
        server.daemon_threads = True
        self.serve(server)


@pytest.fixture
def webhook():
    webhook = Webhook()
    yield webhook
    if webhook.thread.is_alive():
        webhook.down()


def test_deliveries_to_a_receiver_that_was_down_retry_and_arrive_once(stack, webhook):
    started = time.monotonic()
    stack.env.update(PUSH_ENV)
    web = stack.start_web()
    stack.start_worker()
    stack.start_beat()
    receiver = webhook.receiver
    url = web.agent_url("fault-progress")
    paths: dict[str, str] = {}  # task id -> its webhook path
    for n in range(TASKS):
        path = new_path()
        push = {"url": receiver.url(path), "token": f"tok-{n}"}
        params = send_params(f"push {n}", f"push-{uuid.uuid4()}", return_immediately=True, push=push)
        answer = rpc(url, "SendMessage", params)
        assert answer.task, answer
        paths[answer.task["id"]] = path
    assert wait_for(lambda: all(receiver.received(p, succeeded_only=True) for p in paths.values()), 20)
    webhook.down()
    time.sleep(DOWN)
    webhook.up()
    back_at = time.time()

    def delivered_all() -> bool:
        states = stack.store.states(paths)
        if not all(state in TERMINAL for state in states.values()):
            return False
        seqs = stack.store.event_seqs(paths)
        return all(len(receiver.received(paths[t], succeeded_only=True)) >= seqs[t] for t in paths)

    wait_for(delivered_all, 60, interval=0.3)
    time.sleep(1)  # a short extra look catches anything sent twice
    logs = stack.store.logs(paths)
    lost = duplicated = out_of_order = altered = complete = 0
    for task_id, path in paths.items():
        got = receiver.received(path, succeeded_only=True)
        ids = event_ids(got)
        stored = {event.seq: event.payload for event in logs[task_id]}
        lost += len(set(stored) - set(ids))
        duplicated += len(ids) - len(set(ids))
        out_of_order += ids != sorted(ids)
        altered += sum(1 for seq, r in zip(ids, got, strict=True) if json.loads(r["body"]) != stored.get(seq))
        complete += not set(stored) - set(ids)
    retried, given_up, last_delivery = stack.store.rows(
        "SELECT count(*) FILTER (WHERE d.status = 'failed'), count(*) FILTER (WHERE d.status = 'given-up'),"
        " max(d.finished_at) FILTER (WHERE d.status = 'succeeded')"
        " FROM tasks_app_pushdelivery d JOIN tasks_app_pushconfig c ON c.id = d.config_id"
        " WHERE c.task_id = ANY(%s::uuid[])",
        (list(paths),),
    )[0]
    figures = record(
        "webhook_down",
        started,
        down_s=DOWN,
        submitted=TASKS,
        completed=complete,
        failed=given_up,
        lost=lost,
        duplicated=duplicated,
        out_of_order=out_of_order,
        altered=altered,
        retried_attempts=retried,
        worst_resume_s=round(last_delivery.timestamp() - back_at, 1) if last_delivery else None,
        processes_exited=stack.exited(),
    )
    assert figures["retried_attempts"] > 0, "no delivery failed: the receiver was never really down"
    wrong = ("lost", "duplicated", "out_of_order", "altered")
    assert {key: figures[key] for key in wrong} == dict.fromkeys(wrong, 0)
    assert figures["completed"] == TASKS and figures["failed"] == 0
    assert figures["processes_exited"] == []


def event_ids(requests: list[dict]) -> list[int]:
    """The seq of each delivered event, from its X-A2A-Event-Id header ("<task id>:<seq>")."""
    return [int(request["headers"]["X-A2A-Event-Id"].rsplit(":", 1)[1]) for request in requests]
