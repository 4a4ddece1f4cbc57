"""Websockets of the crawl pages: the current snapshot on connect, then what workers publish."""

from __future__ import annotations

from channels.db import database_sync_to_async

from crawlhub.web.consumers import LoginRequiredConsumer
from crawls.engine import live
from crawls.models import OVER_STATES
from crawls.services import visible_crawls

# The list page gets the snapshots of at most this many crawls on connect (newest first).
LIST_SNAPSHOTS = 50


class CrawlConsumer(LoginRequiredConsumer):
    """/ws/crawls/<id>/: one crawl's live page."""

    async def authorize(self) -> bool:
        """Only a crawl this user may see; the first snapshot is read here, sent on accept."""
        self.crawl_id = int(self.scope["url_route"]["kwargs"]["pk"])
        self.first = await database_sync_to_async(_first_snapshot)(
            self.crawl_id, self.scope["user"]
        )
        return self.first is not None

    async def on_accepted(self) -> None:
        self.group = live.crawl_group(self.crawl_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.send_json(self.first)

    async def crawl_stats(self, event: dict) -> None:
        await self.send_json(event)

    async def disconnect(self, code: int) -> None:
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)


class CrawlListConsumer(LoginRequiredConsumer):
    """/ws/crawls/: compact snapshots of the crawls that change and this user may see (their
    own; staff, all), for the list page."""

    async def on_accepted(self) -> None:
        await self.channel_layer.group_add(live.LIST_GROUP, self.channel_name)
        self.joined = True
        for row in await database_sync_to_async(_list_snapshots)(self.scope["user"]):
            await self.send_json(row)

    async def crawl_stats(self, event: dict) -> None:
        user = self.scope["user"]
        if user.is_staff or event.get("owner") == user.pk:
            await self.send_json(event)

    async def disconnect(self, code: int) -> None:
        if getattr(self, "joined", False):  # not for a socket refused at connect
            await self.channel_layer.group_discard(live.LIST_GROUP, self.channel_name)


def _first_snapshot(crawl_id: int, user) -> dict | None:
    """None for a crawl that does not exist or that the user may not see (closed alike)."""
    crawl = visible_crawls(user).filter(pk=crawl_id).first()
    return None if crawl is None else live.snapshot(crawl)


def _list_snapshots(user) -> list[dict]:
    """The list page's rows, on connect, of the newest crawls this user may see that can still
    change; marked on_connect, so the page does not take a row it lacks for news."""
    crawls = visible_crawls(user).exclude(state__in=OVER_STATES).order_by("-pk")[:LIST_SNAPSHOTS]
    # Enough of the series for the rate; every crawl in one Redis round trip.
    rows = live.list_rows(list(crawls), points=live.RATE_WINDOW_SECONDS + 1)
    return [{**row, "on_connect": True} for row in rows]
