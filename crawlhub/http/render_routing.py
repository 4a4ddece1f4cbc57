"""What a rendered page's requests may do (rendering.py loads the page): its document is the
answer the client already fetched; everything else its scripts ask for goes through Router, by
the rules of a fetch (the private-network guard for each hop, the crawl's credentials for its own
hosts only, the page's deadline, max_bytes per response), through the browser context's proxy.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit

from crawlhub.http.client import REDIRECT_STATUSES, FetchResult, refusal

SKIPPED_RESOURCES = frozenset({"image", "media", "font"})
MAX_HOPS = 10
# Response headers that described the bytes on the wire, not the decoded body handed over.
_WIRE_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding"})


@dataclass(frozen=True)
class RenderOptions:
    timeout: float  # seconds the page may take, from the browser's first step to its DOM
    max_bytes: int  # the rendered DOM, and each response a script asks for
    wait_selector: str = ""  # wait for this CSS selector rather than for the network to settle
    # The headers a request to a URL carries besides the browser's own (a crawl's credentials,
    # for its own hosts only).
    headers_for: Callable[[str], Mapping[str, str]] | None = None


def proxy_settings(proxy: str | None) -> dict[str, str] | None:
    """A proxy URL ("http://user:pass@host:port") as Playwright's proxy option."""
    if not proxy:
        return None
    parts = urlsplit(proxy)
    server = f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    found = {"server": server}
    if parts.username is not None:
        found["username"] = unquote(parts.username)
        found["password"] = unquote(parts.password or "")
    return found


class Router:
    """Every request of one page: the document handed over, the rest fetched by the rules."""

    def __init__(self, document: FetchResult, options: RenderOptions, deadline: float) -> None:
        self.document = document
        self.options = options
        self.deadline = deadline
        self.served = False
        self.navigations: list[str] = []  # where a script sent the page, kept as links

    async def handle(self, route: Any) -> None:
        from playwright.async_api import Error as PlaywrightError

        request = route.request
        try:
            if request.is_navigation_request() and request.frame.parent_frame is None:
                if not self.served:
                    self.served = True
                    await route.fulfill(**self._document())
                else:
                    self.navigations.append(request.url)
                    await route.abort("aborted")
            elif request.resource_type in SKIPPED_RESOURCES:
                await route.abort("blockedbyclient")
            else:
                await self._fetch(route, request)
        except PlaywrightError:
            pass  # the page or the browser went away meanwhile: its own error says so

    def _document(self) -> dict:
        headers = {
            name: value
            for name, value in self.document.headers.items()
            if name not in _WIRE_HEADERS
        }
        return {"status": self.document.status, "headers": headers, "body": self.document.body}

    async def _fetch(self, route: Any, request: Any) -> None:
        """The request through the guard, hop by hop, bounded in time and size."""
        loop = asyncio.get_running_loop()
        url, method, hops = request.url, request.method, 0
        while True:
            if await loop.run_in_executor(None, refusal, url):
                await route.abort("blockedbyclient")
                return
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                await route.abort("timedout")
                return
            own = self.options.headers_for(url) if self.options.headers_for else {}
            headers = {**request.headers, **own}
            response = await route.fetch(
                url=url, method=method, headers=headers, max_redirects=0,
                timeout=remaining * 1000,
            )  # fmt: skip
            location = response.headers.get("location", "")
            if response.status in REDIRECT_STATUSES and location and hops < MAX_HOPS:
                url, hops = urljoin(url, location), hops + 1
                if response.status == 303:
                    method = "GET"
                await response.dispose()
                continue
            body = await response.body()
            if len(body) > self.options.max_bytes:
                await route.abort("blockedbyclient")
                return
            await route.fulfill(response=response, body=body)
            return


async def guard_web_socket(ws: Any) -> None:
    """A page's WebSocket connects only where a fetch could."""
    if await asyncio.get_running_loop().run_in_executor(None, refusal, ws.url):
        await ws.close(code=1008, reason="blocked")
    else:
        ws.connect_to_server()
