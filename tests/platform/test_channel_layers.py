"""A task reader's channel is its process's alone, and leaves nothing behind.

channels_redis' pub/sub layer subscribes every `new_channel` in Redis and
unsubscribes it only when a receive is cancelled: each blocking SendMessage
left one more Redis subscription and one more queue in the web process, for
as long as the process lived. The engine's readers take member channels
instead (a2a_platform/channel_layers.py).
"""

import asyncio
import os
import uuid

import pytest
from redis import asyncio as aioredis

from a2a_platform.channel_layers import MEMBER_CAPACITY, InProcessChannelLayer, RedisPubSubLayer
from tasks_app.events import Feed, Subscription
from tests.conftest import SERVICES_MODE
from tests.live import RedisServer

TASK = "00000000-0000-0000-0000-000000000001"
EVENTS = {"type": "task.events", "events": [[1, {"task": {"id": TASK}}]]}


async def _readers_come_and_go(reader, writer, redis_channels) -> None:
    group = f"members-{uuid.uuid4().hex[:8]}"
    for round_ in range(20):
        subscription = Subscription(TASK, group=group)
        subscription.layer = reader
        async with subscription:
            if round_ == 0:
                # A wait that times out (its receive is cancelled) keeps the channel.
                assert await subscription.receive(timeout=0.05) is None
                assert [name for name in await redis_channels() if ".member." in name] == []
            await writer.group_send(group, EVENTS)
            assert await subscription.receive(timeout=5.0) == EVENTS
    assert [name for name in await redis_channels() if ".anchor." not in name] == []


def test_redis_member_channels_are_never_subscribed_and_leave_nothing_behind():
    if not SERVICES_MODE:
        pytest.skip("needs Redis (services mode)")
    url = os.environ["REDIS_URL"]
    prefix = f"test-layer-{uuid.uuid4().hex[:8]}."

    async def scenario():
        reader = RedisPubSubLayer(hosts=[url], prefix=prefix)
        writer = RedisPubSubLayer(hosts=[url], prefix=prefix)
        redis = aioredis.Redis.from_url(url)

        async def redis_channels() -> list[str]:
            await asyncio.sleep(0.05)  # the layer sends (UN)SUBSCRIBE without waiting for the reply
            return [name.decode() for name in await redis.pubsub_channels(f"{prefix}*")]

        try:
            await _readers_come_and_go(reader, writer, redis_channels)
            loop_layer = reader._get_layer()
            assert loop_layer.channels == {}
            assert loop_layer.groups == {}
            # Still subscribed (to its anchor): channels_redis' receiver sleeps 0.1 s
            # between looks while nothing is, and the next reader would wait for that.
            assert all(shard._pubsub.subscribed for shard in loop_layer._shards)
        finally:
            await reader.flush()
            await writer.flush()
            await redis.aclose()

    asyncio.run(scenario())


def test_a_reader_that_could_not_join_while_redis_was_away_leaves_nothing_behind(log_dir):
    # channels_redis lists a channel in its group before it subscribes in Redis. A reader
    # whose join failed left its channel there, one more each retry, so the group never
    # emptied: once Redis was back, the reader's close never unsubscribed it.
    if not SERVICES_MODE:
        pytest.skip("needs redis-server (services mode)")
    redis_server = RedisServer(log_dir, "layer-redis")
    redis_server.start()
    prefix = f"test-layer-{uuid.uuid4().hex[:8]}."
    group = f"outage-{uuid.uuid4().hex[:8]}"

    def reading_with(layer) -> Feed:
        feed = Feed(TASK, group=group)
        feed.subscription.layer = layer
        return feed

    async def scenario():
        reader = RedisPubSubLayer(hosts=[redis_server.url], prefix=prefix)
        writer = RedisPubSubLayer(hosts=[redis_server.url], prefix=prefix)
        try:
            first = reading_with(reader)
            assert await first.join()  # the process's anchor channel is subscribed from now on
            await first.close()
            redis_server.stop()
            await asyncio.sleep(1.5)  # the layer's receiver has met the closed connection
            feed = reading_with(reader)
            for _ in range(3):
                assert not await feed.join()
            redis_server.start()
            for _ in range(50):
                if await feed.join():
                    break
                await asyncio.sleep(0.2)
            assert feed.joined
            await writer.group_send(group, EVENTS)
            assert await feed.receive(timeout=5.0) == EVENTS
            await feed.close()
            loop_layer = reader._get_layer()
            assert loop_layer.groups == {}
            assert loop_layer.channels == {}
            await asyncio.sleep(0.1)  # the layer sends UNSUBSCRIBE without waiting for the reply
            redis = aioredis.Redis.from_url(redis_server.url)
            try:
                left = [name.decode() for name in await redis.pubsub_channels(f"{prefix}*")]
            finally:
                await redis.aclose()
            assert [name for name in left if ".anchor." not in name] == []
        finally:
            await reader.flush()
            await writer.flush()

    try:
        asyncio.run(scenario())
    finally:
        redis_server.stop()


def test_in_process_member_channels_leave_nothing_behind():
    async def scenario():
        layer = InProcessChannelLayer()

        async def no_redis() -> list[str]:
            return []

        await _readers_come_and_go(layer, layer, no_redis)
        assert layer.channels == {}
        assert layer.groups == {}
        assert layer._receive_loops == {}

    asyncio.run(scenario())


def test_in_process_send_to_a_paused_loop_does_not_wait_for_it():
    # A turn's watcher receives on its worker thread's loop, which pauses while the
    # thread runs a database call and between turns (tasks_app/engine.py run_here).
    layer = InProcessChannelLayer()
    worker_loop = asyncio.new_event_loop()

    async def listen() -> asyncio.Task:
        channel = await layer.member_channel()
        await layer.group_add("watchers", channel)
        receiving = asyncio.ensure_future(layer.receive(channel))
        await asyncio.sleep(0)  # the receive has started: its loop is known
        return receiving

    try:
        receiving = worker_loop.run_until_complete(listen())  # ... and now the loop is paused

        async def send() -> None:
            await asyncio.wait_for(layer.group_send("watchers", EVENTS), timeout=2.0)

        asyncio.run(send())
        # Delivered once the worker's loop goes on.
        assert worker_loop.run_until_complete(asyncio.wait_for(receiving, timeout=2.0)) == EVENTS
    finally:
        worker_loop.close()


def test_in_process_a_member_still_received_on_outlives_group_expiry():
    # The console's feed joins its tenant's group once, for as long as the page stays open.
    async def scenario() -> tuple[dict, bool]:
        layer = InProcessChannelLayer(group_expiry=1)
        listening = await layer.new_channel()
        gone = await layer.new_channel()
        await layer.group_add("tenant.1", listening)
        await layer.group_add("tenant.1", gone)
        received = asyncio.ensure_future(layer.receive(listening))
        left = asyncio.ensure_future(layer.receive(gone))
        await asyncio.sleep(0.05)
        left.cancel()
        layer.forget_channel(gone)  # its reader left (the consumer's disconnect)
        await asyncio.sleep(2.5)  # past group_expiry (whole seconds: Channels truncates the time)
        await layer.group_send("tenant.1", {"type": "tenant.task", "task": "t"})
        message = await asyncio.wait_for(received, timeout=5)
        return message, gone in layer.groups.get("tenant.1", {})

    message, gone_kept = asyncio.run(scenario())
    assert message == {"type": "tenant.task", "task": "t"}
    # The one nobody receives on any more is dropped at the expiry, as before.
    assert not gone_kept


def test_redis_a_member_that_stopped_reading_holds_a_bounded_backlog():
    if not SERVICES_MODE:
        pytest.skip("needs Redis (services mode)")
    url = os.environ["REDIS_URL"]
    prefix = f"test-layer-{uuid.uuid4().hex[:8]}."

    async def scenario() -> tuple[int, dict]:
        reader = RedisPubSubLayer(hosts=[url], prefix=prefix)
        writer = RedisPubSubLayer(hosts=[url], prefix=prefix)
        try:
            channel = await reader.member_channel()
            await reader.group_add("busy", channel)
            for seq in range(1, 301):
                await writer.group_send("busy", {"type": "task.events", "events": [[seq, {}]]})
            queue = reader._get_layer().channels[channel]
            for _ in range(100):  # the reader's connection takes them in as they come
                if queue.full():
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.2)  # the rest of the 300, which the full queue drops
            held = queue.qsize()
            first = await asyncio.wait_for(reader.receive(channel), timeout=5)
            return held, first
        finally:
            await reader.flush()
            await writer.flush()

    held, first = asyncio.run(scenario())
    # A stream whose client stopped reading holds this many batches, not every one of its task's.
    assert held == MEMBER_CAPACITY
    assert first["events"][0][0] == 1
