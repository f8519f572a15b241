"""The platform's channel layers: one per mode, both with member channels.

The task engine's readers (a blocking send, a stream, a subscriber) each
take a *member channel*: a channel of their own process that only receives
what is sent to the groups it joins, and that they give back when they leave
(`release_channel`). Channels' own `new_channel` makes a channel any process
can send to; the task engine never sends to one.

Embedded default (InProcessChannelLayer): one process, several event loops.
Daphne serves requests on the main event loop while the embedded Celery worker
threads run agent turns on loops of their own. Channels' InMemoryChannelLayer
wakes a waiting receiver only from the receiver's own loop, so a send from a
worker thread would sit unnoticed. This layer remembers the loop each channel is
received on and hands sends from other loops over to it thread-safely.

Services (RedisPubSubLayer): channels_redis' pub/sub layer. Its `new_channel`
subscribes the channel's name in Redis, and only a receive that is cancelled
unsubscribes it again: a reader whose receive returned kept its subscription
for the life of the process (one more Redis subscription and one more queue
per blocking call, without end). A member channel is known to this process
alone (a group's messages reach it through the group's subscription), so
taking one costs no round trip, and releasing it leaves nothing behind.
"""

import asyncio
import functools
import logging
import threading
import time
import uuid

from channels.exceptions import ChannelFull
from channels.layers import InMemoryChannelLayer
from channels_redis.pubsub import RedisPubSubChannelLayer, RedisPubSubLoopLayer, _async_proxy
from channels_redis.utils import _wrap_close

logger = logging.getLogger(__name__)


def _log_lost(future) -> None:
    if not future.cancelled() and future.exception() is not None:
        logger.warning("A message for a channel of another loop was lost: %r", future.exception())


class InProcessChannelLayer(InMemoryChannelLayer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._receive_loops: dict[str, asyncio.AbstractEventLoop] = {}
        # Groups are joined, left and sent to from every loop of the process (the
        # web's, each worker thread's) at once: Channels' layer iterates them
        # unguarded ("dictionary changed size during iteration").
        self._groups_lock = threading.Lock()

    def _clean_expired(self):
        with self._groups_lock:
            # A member whose channel is still received on is alive, however long ago it
            # joined (a console feed joins once): renewed rather than dropped after
            # group_expiry. Channels of readers that left are forgotten (release_channel).
            now = time.time()
            for members in self.groups.values():
                for channel in members:
                    if channel in self._receive_loops:
                        members[channel] = now
            super()._clean_expired()

    async def group_add(self, group, channel):
        self.require_valid_group_name(group)
        self.require_valid_channel_name(channel)
        with self._groups_lock:
            self.groups.setdefault(group, {})[channel] = time.time()

    async def group_send(self, group, message):
        assert isinstance(message, dict), "Message is not a dict"
        self.require_valid_group_name(group)
        self._clean_expired()
        with self._groups_lock:
            members = list(self.groups.get(group, ()))
        for channel in members:
            try:
                await self.send(channel, message)
            except ChannelFull:
                pass

    async def receive(self, channel):
        self._receive_loops[channel] = asyncio.get_running_loop()
        return await super().receive(channel)

    async def send(self, channel, message):
        loop = self._receive_loops.get(channel)
        if loop is None or loop.is_closed() or loop is asyncio.get_running_loop():
            return await super().send(channel, message)
        # Handed over without waiting for it: the receiver's loop may be a worker
        # thread's, paused while its thread runs a database call or between two of
        # its turns (tasks_app/engine.py run_here). Sends to one channel still
        # arrive in order (call_soon_threadsafe is first in, first out).
        future = asyncio.run_coroutine_threadsafe(super().send(channel, message), loop)
        future.add_done_callback(_log_lost)

    async def group_discard(self, group, channel):
        self.require_valid_channel_name(channel)
        self.require_valid_group_name(group)
        with self._groups_lock:
            members = self.groups.get(group)
            if members is not None:
                members.pop(channel, None)
                if not members:
                    self.groups.pop(group, None)
        self._receive_loops.pop(channel, None)

    async def member_channel(self) -> str:
        return await self.new_channel(prefix="member.")

    async def release_channel(self, channel: str) -> None:
        """Forget a member channel (out of its groups already), and any message still queued for it."""
        self.forget_channel(channel)

    def forget_channel(self, channel: str) -> None:
        """Forget a channel whose reader left (a console feed's, say): its queue and its loop."""
        self.channels.pop(channel, None)
        self._receive_loops.pop(channel, None)


# As many messages as a member channel holds unread, as the in-process layer's capacity: past
# it, what comes is dropped. A reader that stopped reading (a stream whose client stopped
# reading, and a busy task) would otherwise hold every batch published for its task.
MEMBER_CAPACITY = 100


class _MemberQueue(asyncio.Queue):
    """A member channel's queue: full, it drops what comes (channels_redis puts without waiting).

    Nothing is lost for the reader: the task's log has every entry, and a reader that
    meets a gap in the log positions, or a quiet spell, reads the log (tasks_app.events).
    """

    def put_nowait(self, item) -> None:
        if not self.full():
            super().put_nowait(item)


class _RedisPubSubLoopLayer(RedisPubSubLoopLayer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._anchor = None

    async def member_channel(self) -> str:
        if self._anchor is None:
            # channels_redis' receiver sleeps 0.1 s between looks whenever its
            # connection has no subscription: a reader joining then would wait
            # that long for its group's first message. One channel of this
            # process stays subscribed for good (nothing is ever sent to it).
            anchor = f"{self.prefix}anchor.{uuid.uuid4().hex}"
            for shard in self._shards:
                await shard.subscribe(anchor)
            self._anchor = anchor
        channel = f"{self.prefix}member.{uuid.uuid4().hex}"
        self.channels[channel] = _MemberQueue(MEMBER_CAPACITY)
        return channel

    async def release_channel(self, channel: str) -> None:
        self.channels.pop(channel, None)

    async def receive(self, channel):
        # A member channel's wait may be cancelled (a reader's timeout) and
        # resumed: its queue stays, where channels_redis' own receive would
        # drop it on cancellation and subscribe the name in Redis next time.
        queue = self.channels.get(channel) if channel.startswith(f"{self.prefix}member.") else None
        if queue is None:
            return await super().receive(channel)
        return self.channel_layer.deserialize(await queue.get())

    async def flush(self):
        await super().flush()
        self._anchor = None


class RedisPubSubLayer(RedisPubSubChannelLayer):
    """channels_redis' pub/sub layer with member channels (see the module's docstring)."""

    def __getattr__(self, name):
        if name in ("member_channel", "release_channel"):
            return functools.partial(_async_proxy, self, name)
        return super().__getattr__(name)

    def _get_layer(self):
        # As channels_redis' own, building the loop layer above: one per event loop.
        loop = asyncio.get_running_loop()
        layer = self._layers.get(loop)
        if layer is None:
            layer = self._layers[loop] = _RedisPubSubLoopLayer(
                *self._args, **self._kwargs, channel_layer=self
            )
            _wrap_close(self, loop)
        return layer

    def forget_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Let go of a loop's connections without running it (tasks_app.engine retires a worker's loop).

        Closing the loop as usual (_wrap_close) would run it to flush them, and
        with it what was abandoned on it. Its connections are dropped with it.
        """
        self._layers.pop(loop, None)
