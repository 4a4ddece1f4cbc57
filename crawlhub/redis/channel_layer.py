"""The channel layer: channels-redis' RedisChannelLayer, with cancellation that always ends.

Every websocket consumer waits for group messages in a BZPOPMIN on Redis (channels-redis'
receive, a few seconds at a time, in a loop). When the socket closes, Channels cancels that
wait. With redis-py's asyncio client on Python 3.11, about one cancellation in a hundred under
load is lost inside the client's read (the task stays "cancelling" but the read goes on), and
channels-redis then issues the next BZPOPMIN: the consumer never ends. In daphne that is a task
polling Redis forever per lost cancel; in the tests, an event loop that never closes.

A task whose cancellation was lost still says so (Task.cancelling() > 0), so after each wait
the layer checks and raises the CancelledError itself: a lost cancel now ends the consumer
within one BZPOPMIN (brpop_timeout, 5 s). A message the last wait took stays in the layer's
backup queue, as after any cancellation; a consumer that is going away does not need it.
"""

from __future__ import annotations

import asyncio

from channels_redis.core import RedisChannelLayer


class ChannelLayer(RedisChannelLayer):
    async def _brpop_with_clean(self, index, channel, timeout):
        result = await super()._brpop_with_clean(index, channel, timeout)
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError("cancelled while waiting for a message")
        return result
