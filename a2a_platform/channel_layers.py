"""A channel layer for the embedded default: one process, several event loops.

Daphne serves requests on the main event loop while the embedded Celery worker
threads run agent turns on loops of their own. Channels' InMemoryChannelLayer
wakes a waiting receiver only from the receiver's own loop, so a send from a
worker thread would sit unnoticed. This layer remembers the loop each channel is
received on and hands sends from other loops over to it thread-safely.
"""

import asyncio

from channels.layers import InMemoryChannelLayer


class InProcessChannelLayer(InMemoryChannelLayer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._receive_loops: dict[str, asyncio.AbstractEventLoop] = {}

    async def receive(self, channel):
        self._receive_loops[channel] = asyncio.get_running_loop()
        return await super().receive(channel)

    async def send(self, channel, message):
        loop = self._receive_loops.get(channel)
        if loop is None or loop.is_closed() or loop is asyncio.get_running_loop():
            return await super().send(channel, message)
        future = asyncio.run_coroutine_threadsafe(super().send(channel, message), loop)
        await asyncio.wrap_future(future)

    async def group_discard(self, group, channel):
        await super().group_discard(group, channel)
        self._receive_loops.pop(channel, None)
