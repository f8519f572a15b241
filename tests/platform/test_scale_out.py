"""Two Daphne processes and two Celery workers on one PostgreSQL and Redis (services mode only).

Tasks sent to either web complete; a stream started on one web resumes on the
other from its last event id with nothing missed; /metrics on either web counts
the requests of both (prometheus_client multiprocess mode, one directory).
"""

import uuid

import httpx
import pytest

from tasks_app.models import TaskEvent
from tests.conftest import SERVICES_MODE, user_message
from tests.live import metrics_dir, start_web, start_worker, stop_processes
from tests.platform.test_metrics import sample, scrape, wait_for_sample
from tests.sse import read_events, stream

pytestmark = pytest.mark.skipif(not SERVICES_MODE, reason="scale-out needs PostgreSQL and Redis (REDIS_URL)")


@pytest.fixture(scope="module")
def two_of_each(db_settings, log_dir):
    # A queue of its own: the session's worker must not take these webs' turns.
    env = {"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir()), "CELERY_QUEUE": f"scale-{uuid.uuid4().hex[:8]}"}
    started = []
    try:
        for name in ("scale-worker-a", "scale-worker-b"):
            started.append(start_worker(db_settings, log_dir, name=name, extra_env=env))
        webs = [
            start_web(db_settings, log_dir, name=name, extra_env=env)
            for name in ("scale-web-a", "scale-web-b")
        ]
    except BaseException:
        stop_processes(started)
        raise
    yield webs
    stop_processes([process for web in webs for process in web.processes] + started)


def send(web, text: str) -> dict:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": user_message(text, str(uuid.uuid4())),
    }
    return httpx.post(web.agent_url("echo"), json=body, headers={"A2A-Version": "1.0"}, timeout=30).json()


def test_tasks_sent_to_either_web_complete(two_of_each):
    for index in range(6):
        task = send(two_of_each[index % 2], f"scale {index}")["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
        assert f"({f'scale {index}'})" in task["artifacts"][0]["parts"][0]["text"]


def test_a_stream_started_on_one_web_resumes_on_the_other(two_of_each, stored):
    web_a, web_b = two_of_each
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage"}
    body["params"] = user_message("work slowly", str(uuid.uuid4()))
    seen = []
    with stream(web_a.agent_url("progress"), body) as response:
        for event in read_events(response):
            seen.append(event)
            if len(seen) == 3:
                break  # the client drops its connection to web A mid-task
    task_id = seen[0]["data"]["result"]["task"]["id"]
    resume = {"jsonrpc": "2.0", "id": 2, "method": "SubscribeToTask", "params": {"id": task_id}}
    with stream(web_b.agent_url("progress"), resume, headers={"Last-Event-ID": seen[-1]["id"]}) as response:
        resumed = list(read_events(response))
    ids = [int(event["id"]) for event in seen + resumed]
    assert ids == list(range(1, len(ids) + 1)), ids
    stored_log = list(TaskEvent.objects.filter(task_id=task_id).order_by("seq").values_list("seq", "payload"))
    assert [(int(e["id"]), e["data"]["result"]) for e in seen + resumed] == stored_log
    assert resumed[-1]["data"]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_metrics_on_either_web_count_both(two_of_each):
    web_a, web_b = two_of_each
    labels = {"binding": "jsonrpc", "method": "SendMessage", "outcome": "ok"}
    turns = {"handler": "echo", "outcome": "ok"}
    before = scrape(web_a.base_url)
    for web, count in ((web_a, 2), (web_b, 3)):
        for index in range(count):
            assert send(web, f"count {index}")["result"]["task"]
    from_a, from_b = scrape(web_a.base_url), scrape(web_b.base_url)
    # The module's processes share their own directory: the five requests, whichever web is asked.
    sent_before = sample(before, "a2a_requests_total", **labels)
    assert sample(from_a, "a2a_requests_total", **labels) == sent_before + 5
    assert sample(from_b, "a2a_requests_total", **labels) == sent_before + 5
    # The workers' turns are in the same view (recorded a moment after each answer).
    turned_before = sample(before, "a2a_turn_duration_seconds_count", **turns)
    from_b = wait_for_sample(
        web_b.base_url, "a2a_turn_duration_seconds_count", lambda n: n >= turned_before + 5, **turns
    )
    assert sample(from_b, "a2a_turn_duration_seconds_count", **turns) == turned_before + 5


def test_quotas_hold_across_both_webs(two_of_each, stored):
    from tests.tasks_app.test_quotas import fresh_minute, make_tenant, rest_send

    web_a, web_b = two_of_each
    tenant = make_tenant(rate_limit_per_minute=4)
    fresh_minute()
    # Four requests spread over both webs use up the minute: the counter is Redis's, not a process's.
    for web in (web_a, web_b, web_a, web_b):
        assert rest_send(web.base_url, tenant, "open").status_code == 200
    for web in (web_a, web_b):
        refused = rest_send(web.base_url, tenant, "open")
        assert refused.status_code == 429, refused.text
        assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert tenant.tasks.count() == 4
