"""Rendering JavaScript: a page the client fetched (client.py) is loaded in headless Chromium,
which runs its scripts; the rendered DOM becomes the page's body, title and links.
Which pages are worth it, and what a rendered page becomes, are in rendered.py.

The document itself is never fetched by the browser. The client fetched it already, with
everything a fetch gets (guard, proxy, timeouts, size limit, credentials, redirects as
answers), and the browser is handed that answer (route.fulfill). What the page's scripts then
ask for goes through render_routing.Router, by the rules of a fetch. Images, media and fonts are
not loaded; a navigation of the page away (a script setting location) is not followed, its
target is kept as a link. Subresources go through the browser context's proxy: the one the page
was fetched through.

Tabs. Making a browser context and its page costs more than rendering a page in it (the browser
starts a renderer process for each): a tab (context + page) is kept after its page, blank, for
the next page through the same proxy, its cookies cleared; the client's user agent is set on it
for each page. At most CRAWLHUB_BROWSER_PAGES tabs are kept. A tab that failed, timed out or
crashed is closed, not kept.

Threads. Playwright's objects belong to the thread (and event loop) that made them. A slice
fetches from a pool of threads, so one BrowserPool per worker process runs Playwright's async
API on an event loop in a thread of its own; fetch threads hand it pages
(asyncio.run_coroutine_threadsafe) and wait for their answer. At most CRAWLHUB_BROWSER_PAGES
pages are open at once; a browser is replaced after CRAWLHUB_BROWSER_RECYCLE_PAGES pages (the
old one closes once its pages are done, its kept tabs with it), and relaunched when it died. A
page whose browser died under it is a retryable failure (error_kind "browser"), so the crawl
fetches it again.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from crawlhub.http import chromium, render_page
from crawlhub.http.client import FetchResult
from crawlhub.http.guard_proxy import GuardProxy
from crawlhub.http.render_routing import RenderOptions, Router, guard_web_socket, proxy_settings
from crawlhub.http.rendered import failed, rendered_result, renders, selector_problem

__all__ = [
    "BrowserPool",
    "RenderOptions",
    "RenderingStopped",
    "RenderingUnavailable",
    "close_pool",
    "proxy_settings",
    "renders",
    "selector_problem",
    "shared_pool",
]

log = logging.getLogger(__name__)

CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--mute-audio",
    # WebRTC's sockets are the browser's own, past the guard: no UDP (render_page.py takes
    # the API away from pages too).
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
)
REQUEST_THREADS_PER_PAGE = 6
LAUNCH_SECONDS = 60.0
GIVE_UP_SECONDS = 0.1  # how soon a page being rendered is left once it is to be given up
CLOSE_SECONDS = 5.0
CLOSE_ALL_SECONDS = 30.0  # closing every browser and the driver, at most


class RenderingUnavailable(ValueError):
    """Rendering cannot run here: no Chromium, or no Playwright. The message says how to fix it."""


class RenderingStopped(Exception):
    """A page was given up while being rendered (BrowserPool.render's give_up)."""


@dataclass(eq=False)
class _Tab:
    """A browser context with one page, kept from one rendered page to the next through the
    same proxy. Its requests go to the router of the page it renders now; between
    pages it shows about:blank (nothing of the last page runs on) and routes nothing."""

    browser: Any
    proxy: str
    context: Any
    page: Any = None
    devtools: Any = None  # the page's CDP session (its user agent is set through it)
    user_agent: str = ""
    router: Router | None = None
    crashed: bool = False

    async def handle(self, route: Any) -> None:
        from playwright.async_api import Error as PlaywrightError

        if self.router is not None:
            await self.router.handle(route)
            return
        with contextlib.suppress(PlaywrightError):
            await route.abort("aborted")

    async def blank(self) -> bool:
        """Leave the page rendered (its scripts stop, its requests end); False if it failed."""
        self.router = None
        try:
            await self.page.goto("about:blank", timeout=CLOSE_SECONDS * 1000)
        except Exception:  # noqa: BLE001 - a tab that cannot go blank is not kept, that is all
            return False
        return not self.crashed

    async def close(self) -> None:
        self.router = None
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.context.close(), CLOSE_SECONDS)


class BrowserPool:
    """The browsers of one worker process (see the module docstring for the threads)."""

    def __init__(self, executable: str, *, pages: int, recycle_after: int) -> None:
        self.executable = executable
        self.recycle_after = recycle_after
        self.pid = os.getpid()
        self.launches = 0
        self.loop = asyncio.new_event_loop()
        # The threads the pages' requests are sent from (render_routing: the client blocks),
        # a slow answer holding one: enough that the pages open at once do not wait for them.
        self._requests = concurrent.futures.ThreadPoolExecutor(
            REQUEST_THREADS_PER_PAGE * pages, thread_name_prefix="page-requests"
        )
        self.loop.set_default_executor(self._requests)
        self._thread = threading.Thread(target=self.loop.run_forever, name="browsers", daemon=True)
        self._thread.start()
        self._playwright: Any = None
        self._browser: Any = None
        self._rendered = 0  # pages given to the current browser
        self._open: dict[Any, int] = {}  # browser -> its pages open now
        self._pids: dict[Any, list[int]] = {}  # browser -> its process id
        self._drivers: set[int] = set()  # Playwright's driver process, once started
        self._idle: list[_Tab] = []  # tabs kept for the next page, oldest first
        self._pages = pages
        self.tabs_made = 0
        self._slots = self._call(self._make_slots(pages))
        # What Chromium connects to itself (a page's WebSockets) goes through this, guarded.
        self._guard = GuardProxy()
        self._call(self._guard.start())
        self._launching = self._call(self._make_lock())
        self._closed = False

    async def _make_slots(self, pages: int) -> asyncio.Semaphore:
        return asyncio.Semaphore(pages)

    async def _make_lock(self) -> asyncio.Lock:
        return asyncio.Lock()

    def _call(self, coroutine) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def render(
        self,
        document: FetchResult,
        *,
        proxy: str | None,
        options: RenderOptions,
        give_up: threading.Event | None = None,
    ) -> FetchResult:
        """`document` as the browser renders it (see renders() for which are worth it); a
        FetchResult with error and error_kind when rendering failed ("browser": retry it).

        RenderingStopped as soon as `give_up` is set (the worker is stopping): the page is
        left, its tab closed, rather than waited for until its deadline."""
        if not renders(document):
            return document
        if give_up is not None and give_up.is_set():
            raise RenderingStopped(f"rendering {document.url} was given up")
        page = asyncio.run_coroutine_threadsafe(self._render(document, proxy, options), self.loop)
        while give_up is not None and not concurrent.futures.wait([page], GIVE_UP_SECONDS)[0]:
            if give_up.is_set():
                page.cancel()  # the task ends closing the page's tab
                raise RenderingStopped(f"rendering {document.url} was given up")
        return page.result()

    def browser_pids(self) -> list[int]:
        """The process ids of the running browsers (tests kill them)."""
        return self._call(self._running_pids())

    async def _running_pids(self) -> list[int]:
        return [pid for browser in self._open for pid in self._pids.get(browser, [])]

    async def _browser_for_page(self) -> Any:
        async with self._launching:
            current = self._browser
            if (
                current is None
                or not current.is_connected()
                or (self._rendered >= self.recycle_after)
            ):
                if current is not None:
                    self._retire(current)
                self._browser = await self._launch()
                self._rendered = 0
            self._rendered += 1
            self._open[self._browser] = self._open.get(self._browser, 0) + 1
            return self._browser

    async def _launch(self) -> Any:
        from playwright.async_api import async_playwright

        # A page given up while its browser starts cancels this: what was started by then is
        # noted in the finally clauses, for close() to end it (Playwright will not).
        if self._playwright is None:
            drivers = chromium.driver_processes()
            try:
                self._playwright = await async_playwright().start()
            finally:
                self._drivers |= chromium.driver_processes() - drivers
        before = chromium.browser_processes()
        browser = None
        try:
            browser = await self._playwright.chromium.launch(
                executable_path=self.executable,
                args=list(CHROMIUM_ARGS),
                headless=True,
                handle_sigint=False,
                handle_sigterm=False,
                handle_sighup=False,
                timeout=LAUNCH_SECONDS * 1000,
            )
        finally:
            # A launch that failed or was cancelled files what it started under None.
            started = chromium.browser_processes() - before
            self._pids[browser] = sorted({*self._pids.get(browser, []), *started})
        self.launches += 1
        return browser

    def _retire(self, browser: Any) -> None:
        self._idle = [tab for tab in self._idle if tab.browser is not browser]
        if self._open.get(browser, 0) == 0:
            self._open.pop(browser, None)
            self._pids.pop(browser, None)
            asyncio.ensure_future(self._close_browser(browser))

    def _page_done(self, browser: Any) -> None:
        self._open[browser] = self._open.get(browser, 1) - 1
        if browser is not self._browser or not browser.is_connected():
            self._retire(browser)

    async def _close_browser(self, browser: Any) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(browser.close(), CLOSE_SECONDS)

    async def _render(
        self, document: FetchResult, proxy: str | None, options: RenderOptions
    ) -> FetchResult:
        from playwright.async_api import Error as PlaywrightError
        from playwright.async_api import TimeoutError as PlaywrightTimeout

        async with self._slots:
            started = time.monotonic()
            try:
                browser = await self._browser_for_page()
            except PlaywrightError as exc:
                return failed(
                    document, f"the browser did not start: {_first_line(exc)}", "browser", started
                )
            tab: _Tab | None = None
            try:
                # The page's time starts once it has a browser (a launch has its own timeout).
                deadline = time.monotonic() + options.timeout
                user_agent = _header(document.request_headers, "user-agent")
                tab = await self._tab_for(browser, proxy, user_agent)
                result = await self._render_in(tab, document, options, deadline, started)
                if not result.error and await tab.blank():
                    self._keep(tab)
                    tab = None
                return result
            except PlaywrightError as exc:
                if not browser.is_connected() or _closed(exc):
                    log.warning("the browser went away rendering %s: %s", document.url, exc)
                    return failed(
                        document,
                        "the browser closed while rendering the page",
                        "browser",
                        started,
                    )
                # Out of time (the page's scripts and styles, through its proxy, say) reads as a
                # fetch's timeout: retried, and counted against the proxy.
                kind = "timeout" if isinstance(exc, PlaywrightTimeout) else "render"
                return failed(document, f"rendering failed: {_first_line(exc)}", kind, started)
            except TimeoutError:  # its DOM was not read in its time: its scripts hold it
                return failed(
                    document,
                    f"rendering failed: the page did not give its DOM within {options.timeout:g} s",
                    "timeout",
                    started,
                )
            finally:
                if tab is not None:
                    await tab.close()
                self._page_done(browser)

    async def _tab_for(self, browser: Any, proxy: str | None, user_agent: str) -> _Tab:
        """A kept tab of this browser for the proxy (its cookies cleared), or a new one: a
        context and its page, whose every request goes to the tab's router; either way with
        the page's user agent (the client's, which may change from page to page)."""
        tab = None
        for kept in reversed(self._idle):
            if kept.browser is browser and kept.proxy == (proxy or ""):
                self._idle.remove(kept)
                if kept.crashed or kept.page.is_closed():
                    await kept.close()
                else:
                    await kept.context.clear_cookies()
                    tab = kept
                break
        if tab is None:
            tab = await self._new_tab(browser, proxy)
        if user_agent and user_agent != tab.user_agent:
            await tab.devtools.send("Emulation.setUserAgentOverride", {"userAgent": user_agent})
            tab.user_agent = user_agent
        return tab

    async def _new_tab(self, browser: Any, proxy: str | None) -> _Tab:
        # Without a proxy of the crawl's, the guard's own; loopback too goes through the proxy
        # (Chromium sends it past one unless told otherwise).
        proxying = {**(proxy_settings(proxy) or self._guard.settings()), "bypass": "<-loopback>"}
        context = await browser.new_context(
            proxy=proxying, service_workers="block", accept_downloads=False
        )
        tab = _Tab(browser=browser, proxy=proxy or "", context=context)
        try:
            await context.add_init_script(script=render_page.NO_WEBRTC)
            await context.route("**/*", tab.handle)
            await context.route_web_socket("**/*", guard_web_socket)
            tab.page = await context.new_page()
            tab.devtools = await context.new_cdp_session(tab.page)
        except BaseException:
            await tab.close()
            raise
        tab.page.on("crash", lambda _page: setattr(tab, "crashed", True))
        self.tabs_made += 1
        return tab

    def _keep(self, tab: _Tab) -> None:
        """A tab back among the kept ones, at most as many as pages may be open (the oldest
        beyond that is closed): the next page with its proxy skips making a context and a page,
        the bulk of a page's time in the browser."""
        if tab.browser is not self._browser or not tab.browser.is_connected():
            asyncio.ensure_future(tab.close())
            return
        self._idle.append(tab)
        while len(self._idle) > self._pages:
            asyncio.ensure_future(self._idle.pop(0).close())

    async def _render_in(
        self,
        tab: _Tab,
        document: FetchResult,
        options: RenderOptions,
        deadline: float,
        started: float,
    ) -> FetchResult:
        router = tab.router = Router(
            document, options, deadline, proxy=tab.proxy or None, context=tab.context
        )
        page = tab.page
        await page.goto(
            document.url, wait_until="domcontentloaded", timeout=render_page.ms_left(deadline)
        )
        await render_page.settle(page, wait_selector=options.wait_selector, deadline=deadline)
        if tab.crashed:
            return failed(document, "the page crashed the browser tab", "browser", started)
        dom = await asyncio.wait_for(
            render_page.read_dom(page, max_bytes=options.max_bytes),
            max(1.0, deadline - time.monotonic()),
        )
        if dom.html is None:
            result = failed(
                document,
                f"the rendered page is over the size limit: its DOM is more than "
                f"{options.max_bytes:,} bytes (at least {dom.size:,}), and was not read",
                "render",
                started,
            )
            result.truncated = True
            return result
        return rendered_result(document, dom.html, router.navigations, options, started)

    def close(self) -> None:
        """Close the browsers and stop the loop's thread (at exit, and in tests)."""
        if self._closed or os.getpid() != self.pid:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._close_all(), self.loop).result(
                timeout=CLOSE_ALL_SECONDS
            )
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        # A close cut short (a browser that would not close in time, on a loaded machine) left
        # the driver and its browsers running: in a work horse they end with it, but a process
        # that goes on (the web server, a test) would keep them.
        chromium.kill_left(self._drivers, marker=b"run-driver")
        browsers = [pid for pids in self._pids.values() for pid in pids]
        chromium.kill_left(browsers, marker=b"--remote-debugging-pipe")
        # A request still being sent ends by its page's deadline; none waits to start.
        self._requests.shutdown(wait=False, cancel_futures=True)

    async def _close_all(self) -> None:
        self._idle.clear()  # closed with their browser
        await self._guard.close()
        for browser in {*self._open, *filter(None, [self._browser])}:
            await self._close_browser(browser)
        self._open.clear()
        self._browser = None
        if self._playwright is not None:
            with contextlib.suppress(Exception):
                await self._playwright.stop()
            self._playwright = None
        # What is left (a route handler of a closed page, say) ends here rather than being
        # destroyed pending with the loop.
        left = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in left:
            task.cancel()
        if left:
            await asyncio.wait(left, timeout=CLOSE_SECONDS)


def _header(headers: Mapping[str, str], name: str) -> str:
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return ""


def _closed(exc: Exception) -> bool:
    text = str(exc)
    return "has been closed" in text or "Browser closed" in text or "crash" in text.lower()


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


# -- the process's pool ----------------------------------------------------------------------

_pool: BrowserPool | None = None
_pool_lock = threading.Lock()


def shared_pool() -> BrowserPool:
    """This process's BrowserPool, made on first use (and again in a forked child: a pool's
    thread does not survive a fork). RenderingUnavailable when Chromium is not there."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool.pid != os.getpid() or _pool._closed:
            found = chromium.locate()
            if not found:
                raise RenderingUnavailable(found.problem)
            _pool = BrowserPool(
                found.path,
                pages=settings.CRAWLHUB_BROWSER_PAGES,
                recycle_after=settings.CRAWLHUB_BROWSER_RECYCLE_PAGES,
            )
        return _pool


def close_pool() -> None:
    """Close this process's browsers, if it started any."""
    global _pool
    with _pool_lock:
        if _pool is not None and _pool.pid == os.getpid():
            _pool.close()
        _pool = None


atexit.register(close_pool)
