import asyncio

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from crawlhub.web.health import health

# Close code for "not signed in / not allowed", in the private 4000-4999 range.
CLOSE_FORBIDDEN = 4403
HEALTH_EVERY_SECONDS = 5.0


class LoginRequiredConsumer(AsyncJsonWebsocketConsumer):
    """Closes the socket unless the user is signed in (and staff, when staff_only)."""

    staff_only = False

    def allowed(self, user) -> bool:
        return user.is_authenticated and (user.is_staff or not self.staff_only)

    async def connect(self) -> None:
        if not self.allowed(self.scope["user"]) or not await self.authorize():
            await self.close(code=CLOSE_FORBIDDEN)
            return
        await self.accept()
        await self.on_accepted()

    async def authorize(self) -> bool:
        """Checks on the object the socket is about (before accepting): True to let it in."""
        return True

    async def on_accepted(self) -> None:
        """Send the first snapshot, join groups: whatever the page needs once connected."""


class HealthConsumer(LoginRequiredConsumer):
    """The navigation bar's status light: the /healthz report, every few seconds."""

    async def on_accepted(self) -> None:
        self.ticker = asyncio.ensure_future(self._tick())

    async def _tick(self) -> None:
        while True:
            await self.send_json({"type": "health", **await database_sync_to_async(health)()})
            await asyncio.sleep(HEALTH_EVERY_SECONDS)

    async def disconnect(self, code: int) -> None:
        ticker = getattr(self, "ticker", None)
        if ticker:
            ticker.cancel()
