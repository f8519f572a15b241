"""A webhook send whose worker is lost counts as an attempt: one lost every time is given up.

A SENDING attempt whose worker died is taken over after PUSH_SENDING_LEASE
and sent again. It kept its attempt number, so a send that kills its worker
every time (a reply that exhausts it, say) never reached PUSH_MAX_ATTEMPTS,
and the config's later events waited behind it for ever.
"""

from datetime import timedelta

from django.utils import timezone

from tasks_app.models import PushConfig, PushDelivery, TaskEvent
from tasks_app.push import _claim_next
from tests.tasks_app.turn_rows import running_turn


def test_a_send_that_loses_its_worker_every_time_is_given_up_at_the_last_attempt(stored, settings):
    settings.PUSH_MAX_ATTEMPTS = 2
    task, _ = running_turn(attempts=1, lease_seconds=600)
    try:
        config = PushConfig.objects.create(
            tenant=task.tenant, task=task, config_id="lost", url="http://127.0.0.1:9/hook"
        )
        first, second = (
            TaskEvent.objects.create(task=task, seq=seq, kind=TaskEvent.Kind.STATUS, payload={})
            for seq in (1, 2)
        )
        lapsed = timezone.now() - timedelta(seconds=settings.PUSH_SENDING_LEASE + 60)
        lost = PushDelivery.objects.create(
            config=config, event=first, seq=1, status=PushDelivery.Status.SENDING, started_at=lapsed
        )
        behind = PushDelivery.objects.create(config=config, event=second, seq=2)

        again = _claim_next(config.pk, None)
        assert (again.pk, again.attempt) == (lost.pk, 2)  # sent again, as its second attempt
        PushDelivery.objects.filter(pk=lost.pk).update(started_at=lapsed)  # and its worker lost again

        assert _claim_next(config.pk, None).pk == behind.pk  # the next event goes
        lost.refresh_from_db()
        assert lost.status == PushDelivery.Status.GIVEN_UP
        assert "worker was lost" in lost.error
    finally:
        task.context.delete()
