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

_restore_unacked = kombu_redis.QoS.restore_unacked


def _restore_unacked_guarded(self, client=None):
    """kombu's restore_unacked, surviving a connection that is already gone.

    When Redis goes away, the consumer closes its channel and kombu tries to
    put the prefetched messages back; with the connection already torn down
    that raises AttributeError ('NoneType' object has no attribute
    'hostname'), which Celery takes for an unrecoverable error: the worker
    process exits. The messages stay in Redis' unacked set (restored after
    the visibility timeout), and turns come back from their lease in the
    database anyway, so the worker logs it and reconnects instead.
    """
    try:
        return _restore_unacked(self, client)
    except AttributeError as exc:
        logger.warning("Could not restore unacknowledged messages, the broker connection is gone: %r", exc)
        self._delivered.clear()


kombu_redis.QoS.restore_unacked = _restore_unacked_guarded
