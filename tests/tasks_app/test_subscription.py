"""A task subscription's receive must honour cancellation, whatever arrives meanwhile.

Python 3.11's asyncio.wait_for returns the inner result when the outer task is
cancelled just as that result arrives, losing the cancellation. A turn's watcher
that swallowed it in this way kept watching forever and its turn never ended.
"""

import asyncio

import pytest

from a2a_platform.channel_layers import InProcessChannelLayer
from tasks_app.events import Subscription


async def _cancel_as_a_message_arrives(yields_between: int) -> bool:
    """True if the receiver ended cancelled after a cancel() that was accepted."""
    subscription = Subscription("00000000-0000-0000-0000-000000000001")
    subscription.layer = InProcessChannelLayer()
    async with subscription:
        receiver = asyncio.ensure_future(subscription.receive(timeout=5.0))
        for _ in range(3):
            await asyncio.sleep(0)  # the receiver is now waiting on its channel
        await subscription.layer.send(subscription.channel, {"type": "task.event", "seq": 1})
        for _ in range(yields_between):
            await asyncio.sleep(0)
        accepted = receiver.cancel()
        try:
            await receiver
        except asyncio.CancelledError:
            return True
        return not accepted


@pytest.mark.parametrize("yields_between", range(6))
def test_a_cancelled_receive_ends_cancelled_even_when_a_message_arrives(yields_between):
    assert asyncio.run(_cancel_as_a_message_arrives(yields_between))
