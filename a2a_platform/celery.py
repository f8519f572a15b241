"""The Celery app. Workers run agent turns and push deliveries; beat runs the sweepers."""

import logging
import os

from celery import Celery
from kombu.transport import redis as kombu_redis

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "a2a_platform.settings")

logger = logging.getLogger(__name__)

app = Celery("a2a_platform")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def _on_a_live_channel(method, what: str):
    """kombu's QoS `method`, surviving a channel whose connection is already gone.

    When Redis goes away, the consumer drops its channel and, back online,
    builds a new one. kombu still puts back (at the loss) and acknowledges (as
    late-acked jobs finish) the messages of the old channel through it, which
    raises AttributeError ('NoneType' object has no attribute 'hostname' /
    'client'); Celery takes that for an unrecoverable error and the worker
    process exits. Such messages stay in Redis' unacked set and come back
    after the visibility timeout, where a job whose turn is done returns at
    once (turns come back from their lease in the database anyway), so the
    worker logs it and goes on.
    """

    def guarded(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except AttributeError as exc:
            transport = getattr(self.channel, "connection", None)
            if transport is not None and getattr(transport, "client", None) is not None:
                raise
            logger.warning("Could not %s: the broker connection of its channel is gone (%r)", what, exc)
            return None

    return guarded


kombu_redis.QoS.restore_unacked = _on_a_live_channel(
    kombu_redis.QoS.restore_unacked, "restore unacknowledged messages"
)
kombu_redis.QoS.ack = _on_a_live_channel(kombu_redis.QoS.ack, "acknowledge a message")
kombu_redis.QoS.reject = _on_a_live_channel(kombu_redis.QoS.reject, "reject a message")
