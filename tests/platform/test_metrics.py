"""/metrics through prometheus_client: what bindings, turns, streams and pushes count, as a scraper reads it.

In services mode the web process serves what the worker process counted too
(multiprocess mode, tests/live.py gives both one PROMETHEUS_MULTIPROC_DIR).
The server is shared by the session, so each test compares before and after.
"""

import time
import uuid

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tasks_app.models import TaskState
from tests.conftest import user_message
from tests.live import TEST_QUEUE
from tests.sse import read_events, stream
from tests.tasks_app.webhooks import Receiver, new_path


def scrape(base_url: str) -> dict[tuple, float]:
    """Every sample of /metrics as {(name, (label, value), ...): value}."""
    response = httpx.get(f"{base_url}/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, *sorted(sample.labels.items()))] = sample.value
    return samples


def sample(samples: dict, name: str, **labels) -> float:
    return samples.get((name, *sorted(labels.items())), 0.0)


def wait_for_sample(base_url: str, name: str, check, timeout: float = 15.0, **labels) -> dict:
    """Scrape until check(value) holds (a worker records its turn a moment after the answer)."""
    deadline = time.monotonic() + timeout
    while True:
        samples = scrape(base_url)
        if check(sample(samples, name, **labels)) or time.monotonic() > deadline:
            return samples
        time.sleep(0.2)


def test_it_counts_requests_by_binding_method_and_outcome(server, rpc):
    before = scrape(server.base_url)
    sent = rpc("SendMessage", user_message("count me", f"metrics-{uuid.uuid4()}"))
    task_id = sent["result"]["task"]["id"]
    assert rpc("NoSuchMethod", {})["error"]["code"] == -32601
    assert rpc("GetTask", {"id": str(uuid.uuid4())})["error"]["code"] == -32001
    denied = rpc("GetTask", {"id": task_id}, agent="secure-echo")
    assert denied["error"]["code"] == -32600
    rest = httpx.get(f"{server.agent_url('echo')}rest/tasks/{task_id}", headers={"A2A-Version": "1.0"})
    assert rest.status_code == 200
    after = scrape(server.base_url)

    def delta(name, **labels):
        return sample(after, name, **labels) - sample(before, name, **labels)

    total = "a2a_requests_total"
    assert delta(total, binding="jsonrpc", method="SendMessage", outcome="ok") == 1
    # An unknown method name is counted as "unknown": a caller cannot grow the label set.
    assert delta(total, binding="jsonrpc", method="unknown", outcome="method_not_found") == 1
    assert delta(total, binding="jsonrpc", method="NoSuchMethod", outcome="method_not_found") == 0
    assert delta(total, binding="jsonrpc", method="GetTask", outcome="task_not_found") == 1
    assert delta(total, binding="jsonrpc", method="GetTask", outcome="unauthenticated") == 1
    assert delta(total, binding="rest", method="GetTask", outcome="ok") == 1
    seconds = "a2a_request_duration_seconds"
    assert delta(f"{seconds}_count", binding="jsonrpc", method="SendMessage") == 1
    assert delta(f"{seconds}_sum", binding="jsonrpc", method="SendMessage") > 0
    assert delta(f"{seconds}_bucket", binding="jsonrpc", method="SendMessage", le="+Inf") == 1


@pytest.fixture
def crash_agent(stored):
    from agents.models import Agent
    from tenants.models import Tenant

    Agent.objects.update_or_create(
        tenant=Tenant.objects.get(slug="demo"),
        slug="crash",
        defaults={"name": "Crash", "handler": "crash", "enabled": True},
    )


def test_it_times_turns_by_handler_in_the_worker_process(server, rpc, crash_agent):
    labels = {"handler": "echo", "outcome": "ok"}
    before = sample(scrape(server.base_url), "a2a_turn_duration_seconds_count", **labels)
    assert rpc("SendMessage", user_message("turn", f"metrics-{uuid.uuid4()}"))["result"]["task"]
    after = wait_for_sample(
        server.base_url, "a2a_turn_duration_seconds_count", lambda value: value > before, **labels
    )
    assert sample(after, "a2a_turn_duration_seconds_count", **labels) == before + 1
    assert sample(after, "a2a_turn_duration_seconds_bucket", le="600.0", **labels) >= before + 1
    failed = {"handler": "crash", "outcome": "failed"}
    crashed_before = sample(after, "a2a_turn_duration_seconds_count", **failed)
    rpc("SendMessage", user_message("crash", f"metrics-{uuid.uuid4()}"), agent="crash")
    crashed = wait_for_sample(
        server.base_url, "a2a_turn_duration_seconds_count", lambda value: value > crashed_before, **failed
    )
    assert sample(crashed, "a2a_turn_duration_seconds_count", **failed) == crashed_before + 1


def test_tasks_by_state_list_every_state_and_queue_depth_is_reported(server):
    samples = scrape(server.base_url)
    for state in TaskState.values:
        assert ("a2a_tasks", ("state", state)) in samples, state
    for turn in ("pending", "running", "done"):
        assert ("a2a_turns", ("turn", turn)) in samples, turn
    depth = [key for key in samples if key[0] == "a2a_queue_depth"]
    # The turn queue and the control lane's (the server's CELERY_QUEUE: tests/live.py).
    assert {key[1] for key in depth} == {("queue", TEST_QUEUE), ("queue", f"{TEST_QUEUE}-control")}
    assert all(samples[key] >= 0 for key in depth)


def test_quota_refusals_are_counted_by_reason(server, stored):
    from tests.tasks_app.test_quotas import fresh_minute, make_tenant, rest_send

    tenant = make_tenant(rate_limit_per_minute=1)
    fresh_minute()
    key = ("a2a_quota_refusals_total", ("reason", "RATE_LIMIT_EXCEEDED"))
    before = scrape(server.base_url).get(key, 0)
    assert rest_send(server.base_url, tenant, "open").status_code == 200
    assert rest_send(server.base_url, tenant, "open").status_code == 429
    assert scrape(server.base_url).get(key, 0) == before + 1


def test_it_counts_open_streams_until_they_close(server):
    baseline = sample(scrape(server.base_url), "a2a_active_streams")
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage"}
    body["params"] = user_message("stream", f"metrics-{uuid.uuid4()}")
    with stream(server.agent_url("progress"), body) as response:
        events = read_events(response)  # kept: a reader dropped early closes the connection
        assert next(events)["data"]["result"]["task"]["id"]
        assert sample(scrape(server.base_url), "a2a_active_streams") == baseline + 1
        assert next(events)["id"] == "2"
    # The client went away: the server notices and closes its side.
    closed = wait_for_sample(server.base_url, "a2a_active_streams", lambda value: value == baseline)
    assert sample(closed, "a2a_active_streams") == baseline


def test_it_counts_push_deliveries_by_outcome(server, rpc):
    receiver = Receiver()
    receiver.thread.start()
    try:
        path = new_path()
        receiver.failures[path] = 1
        before = scrape(server.base_url)
        params = {
            **user_message("push", f"metrics-{uuid.uuid4()}"),
            "configuration": {"taskPushNotificationConfig": {"url": receiver.url(path)}},
        }
        assert rpc("SendMessage", params)["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert len(receiver.wait_for(path, 4)) == 4
        after = wait_for_sample(
            server.base_url,
            "a2a_push_deliveries_total",
            lambda value: value >= sample(before, "a2a_push_deliveries_total", outcome="succeeded") + 4,
            outcome="succeeded",
        )
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()
    for outcome, count in (("succeeded", 4), ("failed", 1), ("given_up", 0)):
        name = "a2a_push_deliveries_total"
        assert sample(after, name, outcome=outcome) - sample(before, name, outcome=outcome) == count, outcome
