"""A backlog of queued turns is not flooded with copies of their jobs.

The sweeper sends a turn still queued after A2A_TURN_REDISPATCH_AFTER seconds
again, in case its job was lost (a broker outage, a killed worker's prefetch).
It cannot tell a lost job from one waiting behind others, so each further
copy of one turn waits twice as long as the one before, up to
A2A_TURN_REDISPATCH_MAX (tasks_app/sweeper.py). Before that, every turn
waiting in a backlog was sent again every A2A_TURN_REDISPATCH_AFTER seconds:
the copies grew with the square of the backlog, each one a job in the queue
and a claim a worker ran for nothing.
"""

import re
import time
import uuid
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from agents.models import Agent
from tasks_app import metrics
from tasks_app.models import Message
from tasks_app.sweeper import redispatch_wait, turn_sweep
from tenants.models import Tenant
from tests.conftest import SERVICES_MODE, rpc_to, user_message
from tests.live import start_web
from tests.platform.test_metrics import sample, scrape
from tests.tasks_app.turn_rows import running_turn

SENT_AGAIN = re.compile(r"Turn \d+ of task (\S+) is still queued; sending it again")


def queued_turn(waiting: float, copies: int) -> Message:
    """A queued turn last handed to the workers `waiting` seconds ago, already sent again `copies` times."""
    _, message = running_turn(attempts=0, lease_seconds=0)
    Message.objects.filter(pk=message.pk).update(
        turn=Message.Turn.PENDING,
        lease_until=None,
        dispatched_at=timezone.now() - timedelta(seconds=waiting),
        redispatches=copies,
    )
    return message


def swept(action: str) -> float:
    """This process's a2a_swept_turns_total for `action`."""
    return metrics.SWEPT_TURNS.labels(action)._value.get()


def sent_again(message: Message) -> bool:
    """Whether a sweep sends the turn again (and counts the copy, in its row and in /metrics)."""
    before, counted = (
        Message.objects.values_list("redispatches", flat=True).get(pk=message.pk),
        swept("copied"),
    )
    copies = turn_sweep(task_pks=[message.task_id])["redispatched"]
    after = Message.objects.values_list("redispatches", flat=True).get(pk=message.pk)
    assert after == before + copies, (before, copies, after)
    assert swept("copied") == counted + copies
    return bool(copies)


def test_each_copy_of_a_queued_turn_waits_twice_as_long_as_the_last_up_to_the_cap(stored):
    first = settings.A2A_TURN_REDISPATCH_AFTER
    assert [redispatch_wait(n) for n in range(4)] == [first, 2 * first, 4 * first, 8 * first]
    assert redispatch_wait(1000) == settings.A2A_TURN_REDISPATCH_MAX
    for copies in (0, 1, 2, 3, 4, 7, 30):
        wait = redispatch_wait(copies)
        assert not sent_again(queued_turn(wait - 1, copies)), f"copy {copies + 1} came early"
        assert sent_again(queued_turn(wait + 1, copies)), f"copy {copies + 1} never came"


def test_a_turn_queued_with_no_dispatch_time_is_sent_again_by_its_age(stored):
    # Queued before the column said when: its creation time stands in.
    message = queued_turn(0, 0)
    Message.objects.filter(pk=message.pk).update(dispatched_at=None, created_at=timezone.now())
    assert not sent_again(message)
    Message.objects.filter(pk=message.pk).update(
        created_at=timezone.now() - timedelta(seconds=settings.A2A_TURN_REDISPATCH_AFTER + 1)
    )
    assert sent_again(message)


def test_a_turn_run_again_after_its_worker_was_lost_starts_its_copies_over(stored):
    message = queued_turn(0, 5)
    Message.objects.filter(pk=message.pk).update(
        turn=Message.Turn.RUNNING, turn_attempts=1, lease_until=timezone.now() - timedelta(seconds=1)
    )
    run_again = swept("run_again")
    assert turn_sweep(task_pks=[message.task_id])["requeued"] == 1
    assert swept("run_again") == run_again + 1
    # Its next copy, if its new job is lost too, comes after A2A_TURN_REDISPATCH_AFTER.
    assert Message.objects.values_list("redispatches", flat=True).get(pk=message.pk) == 0


# A live backlog on the embedded default, whose sweeper is a thread of its own: in services
# mode a sweep is a job, and waits for a free worker thread as the turns it would send again do.
TASKS = 10
FIRST_WAIT, MOST_WAIT = 0.5, 4.0


def most_copies(waited: float) -> int:
    """How many copies of a turn queued for `waited` seconds may be sent: one per wait it sat out."""
    copies, at, wait = 0, 0.0, FIRST_WAIT
    while at + wait <= waited:
        copies, at, wait = copies + 1, at + wait, min(wait * 2, MOST_WAIT)
    return copies


@pytest.mark.skipif(SERVICES_MODE, reason="the embedded default's sweeper thread sweeps as the turns wait")
def test_a_backlog_of_turns_is_sent_again_a_few_times_each_not_every_sweep(stored, db_settings, log_dir):
    Agent.objects.update_or_create(
        tenant=Tenant.objects.get(slug="demo"),
        slug="napper",
        defaults={"name": "napper", "handler": "sleeper", "config": {"seconds": 1.0}},
    )
    # One worker thread, so the ten turns queue: the last one waits about 9 s.
    web = start_web(
        db_settings,
        log_dir,
        name="web-backlog",
        extra_env={
            "EMBEDDED_WORKER_THREADS": "1",
            "A2A_SWEEP_INTERVAL": "0.25",
            "A2A_TURN_REDISPATCH_AFTER": str(FIRST_WAIT),
            "A2A_TURN_REDISPATCH_MAX": str(MOST_WAIT),
        },
    )
    try:
        task_ids = []
        for k in range(TASKS):
            params = {**user_message("nap", f"backlog-{k}-{uuid.uuid4()}"), "configuration": {}}
            params["configuration"]["returnImmediately"] = True
            task_ids.append(rpc_to(web, "SendMessage", params, agent="napper")["result"]["task"]["id"])
        deadline = time.monotonic() + TASKS * 3 + 10
        turns = Message.objects.filter(task_id__in=task_ids, role=Message.Role.USER)
        while turns.exclude(turn=Message.Turn.DONE).exists():
            assert time.monotonic() < deadline, "the backlog did not drain"
            time.sleep(0.3)
        rows = list(turns.values_list("created_at", "turn_started_at", "turn_attempts", "redispatches"))
        # The copies of these turns (the sweeper sees the others the session left queued, too).
        copies = sum(task_id in task_ids for task_id in SENT_AGAIN.findall(web.processes[0].output()))
        counted = sample(scrape(web.base_url), "a2a_swept_turns_total", action="copied")
    finally:
        web.stop()
    waits = sorted((started - created).total_seconds() for created, started, _, _ in rows)
    allowed = sum(most_copies(waited) for waited in waits)
    figures = f"copies {copies} (allowed {allowed}), waits {[round(w, 1) for w in waits]}"
    print(f"\nREDISPATCH backlog of {TASKS}: {figures}")
    assert {attempts for _, _, attempts, _ in rows} == {1}, f"a turn ran more than once: {figures}"
    # The backlog was deep enough for copies to matter, and the sweeps did send some.
    assert waits[-1] >= 6, f"the backlog drained too fast to test anything: {figures}"
    assert copies > 0, f"the server's log shows no copy sent: {figures}"
    assert copies == sum(redispatches for *_, redispatches in rows), figures
    assert counted >= copies, f"/metrics counted {counted} copies: {figures}"
    assert copies <= allowed, f"turns were sent again too often: {figures}"
