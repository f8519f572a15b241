"""The Celery app. Workers run agent turns and push deliveries; beat runs the sweepers."""

import logging
import os
from collections.abc import Mapping
from functools import cached_property

from celery import Celery, signals
from kombu.transport import redis as kombu_redis

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "a2a_platform.settings")

logger = logging.getLogger(__name__)


class _CelerySettings(Mapping):
    """Django's CELERY_* settings, read once, when Celery first loads its configuration.

    Celery looks its settings up on every publish (about six per job), each
    under two or three names and in every source in turn. Against Django's lazy
    settings object each miss is a raised AttributeError: about 0.4 ms of CPU per
    published job, a third of what a publish costs. Against a dict a miss is
    nothing. Settings do not change while a process runs.
    """

    @cached_property
    def _values(self) -> dict:
        from django.conf import settings

        return {name: getattr(settings, name) for name in dir(settings) if name.startswith("CELERY_")}

    def __getitem__(self, key):
        return self._values[key]

    def __iter__(self):
        return iter(self._values)

    def __len__(self):
        return len(self._values)


app = Celery("a2a_platform")
app.config_from_object(_CelerySettings(), namespace="CELERY")
app.autodiscover_tasks()


@signals.worker_ready.connect
@signals.worker_process_init.connect
def _startup_objects_frozen(**kwargs) -> None:
    # A threads pool's worker is ready in its one process; a prefork pool's children each start.
    from a2a_platform.collector import freeze_startup_objects

    freeze_startup_objects()


@signals.celeryd_after_setup.connect
def _lane_queues(sender, instance, **kwargs) -> None:
    # WORKER_LANE (settings.py): a worker of one lane takes its queue alone (over any -Q); unset, both.
    from django.conf import settings

    if settings.WORKER_LANE:
        instance.app.amqp.queues.select([settings.A2A_LANE_QUEUES[settings.WORKER_LANE]])


@signals.task_prerun.connect
def _connection_checked_if_idle(**kwargs) -> None:
    from tasks_app.db import connection_checked_if_idle

    connection_checked_if_idle()


@signals.task_postrun.connect
def _connection_dropped_if_broken(**kwargs) -> None:
    # In place of the Django fixup's close around every job (CELERY_DB_REUSE_MAX, settings.py).
    from tasks_app.db import connection_dropped_if_broken

    connection_dropped_if_broken()


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


class _RedisChannel(kombu_redis.Channel):
    """kombu's Redis channel, keeping the one client it publishes with.

    kombu builds a new redis-py client object (over the same connection pool)
    for every message it publishes; building one costs more CPU than the LPUSH
    it sends. The client holds no connection of its own, so one per channel
    does the same work: a lost connection is replaced by the pool, a lost
    channel takes its client with it.
    """

    def _create_client(self, asynchronous=False):
        if asynchronous:
            return super()._create_client(asynchronous=True)
        client = self.__dict__.get("_publish_client")
        if client is None:
            client = self.__dict__["_publish_client"] = super()._create_client()
        return client


class RedisTransport(kombu_redis.Transport):
    """The broker transport in services mode (settings.CELERY_BROKER_TRANSPORT)."""

    Channel = _RedisChannel
