import asyncio

from channels.db import database_sync_to_async

from crawlhub.web.consumers import LoginRequiredConsumer
from proxies import health

# Checked-out counts move with every lease, not only on inventory changes: re-send this often.
RESEND_SECONDS = 2.0


class ProxyHealthConsumer(LoginRequiredConsumer):
    """Staff only: the pool-health snapshot on connect, on every pool change made through
    proxies/services.py and validation.py, and every RESEND_SECONDS."""

    staff_only = True

    async def on_accepted(self) -> None:
        await self.channel_layer.group_add(health.HEALTH_GROUP, self.channel_name)
        self.ticker = asyncio.ensure_future(self._tick())

    async def _tick(self) -> None:
        while True:
            await self.send_json(await database_sync_to_async(health.health_snapshot)())
            await asyncio.sleep(RESEND_SECONDS)

    async def proxies_health(self, event: dict) -> None:
        await self.send_json(event)

    async def disconnect(self, code: int) -> None:
        ticker = getattr(self, "ticker", None)
        if ticker:
            ticker.cancel()
            await self.channel_layer.group_discard(health.HEALTH_GROUP, self.channel_name)
