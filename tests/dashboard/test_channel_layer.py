"""The channel layer the websockets wait on: a consumer whose socket closes ends, always.

redis-py's asyncio client sometimes loses a cancellation inside a read (see
crawlhub/redis/channel_layer.py); a consumer cancelled then would wait for group messages forever.
"""

from __future__ import annotations

import asyncio
import random
import sys

import pytest
from channels.layers import get_channel_layer

from crawlhub.redis.channel_layer import ChannelLayer
from tests.support import processes

# What it checks does not depend on the database: .ci/run runs it on SQLite only.
pytestmark = pytest.mark.once


CANCELS = 300


@pytest.fixture
def busy_cores():
    """Two processes that keep both cores busy: the lost cancellation needs a loaded machine."""
    busy = [processes.spawn([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    yield
    for proc in busy:
        processes.stop(proc)


@pytest.mark.slow
async def test_a_cancelled_wait_for_messages_always_ends(redis_server, busy_cores):
    layer = get_channel_layer()
    assert isinstance(layer, ChannelLayer)
    layer.brpop_timeout = 1  # how long a lost cancellation may keep a receive: one wait
    channel = await layer.new_channel()
    rng = random.Random(7)
    try:
        for n in range(CANCELS):
            waiting = asyncio.ensure_future(layer.receive(channel))
            await asyncio.sleep(rng.uniform(0, 0.1))
            waiting.cancel()
            done, _ = await asyncio.wait([waiting], timeout=5)
            assert waiting in done, f"cancel {n + 1} of {CANCELS} did not end the wait"
    finally:
        await layer.close_pools()
