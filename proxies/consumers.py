from asgiref.sync import sync_to_async

from crawlhub.consumers import LoginRequiredConsumer
from proxies import pool


class ProxyHealthConsumer(LoginRequiredConsumer):
    """Staff only: a pool-health snapshot on connect (live updates come later)."""

    staff_only = True

    async def on_accepted(self) -> None:
        await self.send_json({"type": "proxies.health", **await sync_to_async(pool.health)()})
