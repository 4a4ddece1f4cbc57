"""What a rendered page's requests may do (rendering.py loads the page): its document is the
answer the client already fetched; everything else its scripts ask for goes through Router, by
the rules of a fetch: crawlhub's client (client.py) sends it, through the page's proxy, with the
private-network guard at each hop, the crawl's credentials for its own hosts only, the page's
deadline, and max_bytes read as the answer streams in (an answer over it is refused, its
connection dropped: neither Playwright's driver nor the browser ever holds more). The browser is
handed what the client read (route.fulfill), and the cookies the answer set.

Cookies. The page's cookies live in its browser context: each request carries those the context
has for its URL, and the cookies an answer sets (the client's own jar, one per request) are
added to the context, as the browser would have done.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.cookiejar import Cookie
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit

from crawlhub.http import client
from crawlhub.http.client import REDIRECT_STATUSES, FetchResult, refusal

SKIPPED_RESOURCES = frozenset({"image", "media", "font"})
MAX_HOPS = 10
# Response headers that described the bytes on the wire, not the decoded body handed over; and
# set-cookie, whose cookies go to the context one by one (see the module docstring).
_WIRE_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding"})
_NOT_HANDED = _WIRE_HEADERS | {"set-cookie"}
# Request headers the client sets itself (cookie: the context's; accept-encoding: only what
# the client decodes in bounded steps), or that describe one connection.
_NOT_SENT = frozenset(
    {
        "cookie",
        "accept-encoding",
        "host",
        "content-length",
        "connection",
        "keep-alive",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
# How a request the client could not make fails in the page (Playwright's error codes).
_ABORTS = {"blocked": "blockedbyclient", "timeout": "timedout", "refused": "connectionrefused"}


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

    def __init__(
        self,
        document: FetchResult,
        options: RenderOptions,
        deadline: float,
        *,
        proxy: str | None,
        context: Any,
    ) -> None:
        self.document = document
        self.options = options
        self.deadline = deadline
        self.proxy = proxy
        self.context = context  # the browser context: its cookies
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
        """The request through the client, hop by hop, bounded in time and size."""
        loop = asyncio.get_running_loop()
        url, method, body, hops = request.url, request.method, request.post_data_buffer, 0
        sent = {k: v for k, v in request.headers.items() if k.lower() not in _NOT_SENT}
        while True:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                await route.abort("timedout")
                return
            headers = {**sent, **await self._cookie_header(url)}
            answer, cookies = await loop.run_in_executor(
                None, self._send, url, method, body, headers, remaining
            )
            await self._keep_cookies(cookies)
            location = answer.headers.get("location", "")
            if answer.status in REDIRECT_STATUSES and location and hops < MAX_HOPS:
                url, hops = urljoin(url, location), hops + 1
                # As browsers do: a 303 is followed with a GET, and so are a POST's 301 and 302.
                if answer.status == 303 or (answer.status in (301, 302) and method == "POST"):
                    method, body = "GET", None
                    sent = {k: v for k, v in sent.items() if k.lower() != "content-type"}
                continue
            if answer.error or answer.truncated or answer.status is None:
                await route.abort(_ABORTS.get(answer.error_kind, "failed"))
                return
            headers = {k: v for k, v in answer.headers.items() if k not in _NOT_HANDED}
            await route.fulfill(status=answer.status, headers=headers, body=answer.body)
            return

    def _send(
        self,
        url: str,
        method: str,
        body: bytes | None,
        headers: dict[str, str],
        remaining: float,
    ) -> tuple[FetchResult, list[Cookie]]:
        """One hop, in a thread: the client's answer (at most max_bytes of its body read; over
        that, truncated) and the cookies it set. A Fetcher of its own for each request: its
        deadline is the page's, and its jar holds this answer's cookies only."""
        own = self.options.headers_for(url) if self.options.headers_for else {}
        if own:
            headers = _with_own(headers, own)
        with client.Fetcher(
            timeout=remaining,
            total_timeout=remaining,
            max_bytes=self.options.max_bytes,
            pool_size=1,
        ) as fetcher:
            answer = fetcher.send(url, method=method, body=body, headers=headers, proxy=self.proxy)
            return answer, list(fetcher.session.cookies)

    async def _cookie_header(self, url: str) -> dict[str, str]:
        cookies = await self.context.cookies([url])
        if not cookies:
            return {}
        return {"Cookie": "; ".join(f"{c['name']}={c['value']}" for c in cookies)}

    async def _keep_cookies(self, cookies: list[Cookie]) -> None:
        from playwright.async_api import Error as PlaywrightError

        for cookie in cookies:
            # One the browser would refuse (a domain that is not the answer's, say) is dropped
            # as the browser would drop it; the answer is handed over all the same.
            with contextlib.suppress(PlaywrightError):
                await self.context.add_cookies([_browser_cookie(cookie)])


def _with_own(headers: dict[str, str], own: Mapping[str, str]) -> dict[str, str]:
    """The page's headers and the crawl's credentials for the URL: theirs win, but a cookie of
    theirs joins the page's cookies rather than replacing them."""
    merged = {k: v for k, v in headers.items() if k.lower() not in {n.lower() for n in own}}
    for name, value in own.items():
        if name.lower() == "cookie" and (page := _header(headers, "cookie")):
            value = f"{page}; {value}"
        merged[name] = value
    return merged


def _header(headers: Mapping[str, str], name: str) -> str:
    return next((v for k, v in headers.items() if k.lower() == name), "")


def _browser_cookie(cookie: Cookie) -> dict[str, Any]:
    """A cookie of the client's jar as Playwright adds it to a context: a domain starting with
    a dot is the domain's and its subdomains', any other the host's only (as the jar keeps
    them)."""
    found: dict[str, Any] = {
        "name": cookie.name,
        "value": cookie.value or "",
        "domain": cookie.domain,
        "path": cookie.path or "/",
        "secure": bool(cookie.secure),
        "httpOnly": any(cookie.has_nonstandard_attr(n) for n in ("HttpOnly", "httponly")),
    }
    if cookie.expires is not None:
        found["expires"] = float(cookie.expires)
    for spelling in ("SameSite", "samesite"):
        same_site = str(cookie.get_nonstandard_attr(spelling) or "").capitalize()
        if same_site in ("Strict", "Lax", "None"):
            found["sameSite"] = same_site
    return found


async def guard_web_socket(ws: Any) -> None:
    """A page's WebSocket connects only where a fetch could: asked here first, by its URL
    (the guard reads http(s) URLs), for a refusal in words; then at connection time by the
    proxy it goes through (guard_proxy.py, or the crawl's own)."""
    url = "http" + ws.url[2:] if ws.url.startswith(("ws://", "wss://")) else ws.url
    if await asyncio.get_running_loop().run_in_executor(None, refusal, url):
        await ws.close(code=1008, reason="blocked")
    else:
        ws.connect_to_server()
