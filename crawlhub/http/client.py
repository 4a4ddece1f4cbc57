"""Fetching pages with requests: bounded in time and size, never raising for what a site does.

Every fetch returns a FetchResult. Network trouble, hostile servers (endless redirects, bodies
that never end, gzip bombs, bytes trickled one per second) and odd content become an `error`
and `error_kind`, so a slice worker can count, retry or give up without a try/except of its own.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from urllib.parse import urljoin, urlsplit

import requests
import urllib3
import urllib3.connection
import urllib3.exceptions
from requests.adapters import HTTPAdapter
from requests.cookies import extract_cookies_to_jar
from requests.structures import CaseInsensitiveDict

from crawlhub.http import links
from crawlhub.http.netguard import BlockedAddress
from crawlhub.http.urls import url_problem
from crawlhub.http.useragents import pick_user_agent

ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
# Only what we can decode with a bounded output size (urllib3 caps each decompress call).
ACCEPT_ENCODING = "gzip, deflate"
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
RETRYABLE_KINDS = frozenset({"timeout", "refused", "connection", "proxy"})
MAX_RETRY_AFTER = 3600.0
CHUNK = 64 * 1024
# A redirect's own body is read (to keep the connection pooled) only when it is this small.
REDIRECT_BODY_LIMIT = 16 * 1024


@dataclass
class FetchResult:
    url: str
    final_url: str  # the URL that answered last (the last redirect target, or `url`)
    status: int | None  # None when no response
    content_type: str  # the Content-Type header as sent, charset included
    body: bytes  # at most max_bytes, decoded from gzip/deflate
    nbytes: int  # body bytes received on the wire (compressed size when compressed)
    truncated: bool  # body hit max_bytes (not parsed then)
    elapsed_ms: int
    redirects: list[str]  # each redirect target followed, in order (the last is final_url)
    error: str  # "" when a full response came; else what went wrong, for people
    error_kind: str  # "" | "timeout" | "refused" | "dns" | "connection" | "redirects" | ...
    title: str = ""
    links: list[str] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)  # final response, lowercase names

    @property
    def retryable(self) -> bool:
        if self.error_kind in RETRYABLE_KINDS:
            return True
        return self.status is not None and (self.status >= 500 or self.status == 429)

    @property
    def retry_after(self) -> float | None:
        """Seconds from a Retry-After header (delay or HTTP date), when present and <= 1 h."""
        value = self.headers.get("retry-after", "").strip()
        if not value:
            return None
        if value.isdigit():
            seconds = float(value)
        else:
            try:
                when = parsedate_to_datetime(value)
            except (TypeError, ValueError, IndexError):
                return None
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
            seconds = max(0.0, (when - datetime.now(UTC)).total_seconds())
        return seconds if seconds <= MAX_RETRY_AFTER else None


class FetchError(Exception):
    """Why a fetch stopped; turned into FetchResult.error / error_kind, never raised out."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind


@dataclass
class _Body:
    data: bytes = b""
    truncated: bool = False
    wire_bytes: int = 0
    error: FetchError | None = None


class Fetcher:
    """One requests.Session with a connection pool, shared by the threads of a slice."""

    def __init__(
        self,
        *,
        timeout: float,
        max_bytes: int,
        user_agent_mode: str = "random",
        user_agent: str = "",
        pool_size: int = 16,
        max_redirects: int = 10,
        total_timeout: float | None = None,
        guard: Callable[[str], None] | None = None,
    ) -> None:
        if min(timeout, max_bytes, pool_size) <= 0 or max_redirects < 0:
            raise ValueError("timeout, max_bytes and pool_size must be > 0, max_redirects >= 0")
        if "\r" in user_agent or "\n" in user_agent:
            raise ValueError("user_agent: must be a single line")
        pick_user_agent(user_agent_mode, user_agent)  # a bad mode fails here, not per page
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.user_agent_mode = user_agent_mode
        self.user_agent = user_agent
        self.max_redirects = max_redirects
        # The whole fetch (all hops and the body) gets a deadline too: the (connect, read)
        # timeouts restart on every byte, so a trickling server could otherwise hold a thread
        # for as long as it likes.
        self.total_timeout = total_timeout if total_timeout else 3 * timeout
        self.session = _session(pool_size)
        # Called with each URL before it is fetched (first and every redirect hop); raising
        # BlockedAddress refuses it (crawlhub/http/netguard.py).
        self.guard = guard

    def fetch(self, url: str, *, proxy: str | None = None) -> FetchResult:
        """GET `url` (through `proxy` if given). Never raises for network or content problems."""
        return self._fetch(url, proxy=proxy, max_bytes=self.max_bytes, parse=True)

    def fetch_text(
        self, url: str, *, limit: int = 512 * 1024, proxy: str | None = None
    ) -> tuple[int | None, str]:
        """(status, text) for robots.txt; status None when the server could not be read.

        A redirect that could not be followed keeps its 3xx status (RFC 9309 treats that like
        an unavailable file); any other error reads as "no response".
        """
        result = self._fetch(url, proxy=proxy, max_bytes=limit, parse=False)
        if result.error_kind == "redirects":
            return result.status, ""
        if result.error or result.status is None:
            return None, ""
        return result.status, result.body.decode("utf-8", "replace").lstrip("\ufeff")

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> Fetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _fetch(self, url: str, *, proxy: str | None, max_bytes: int, parse: bool) -> FetchResult:
        started = time.monotonic()
        deadline = started + self.total_timeout
        result = FetchResult(
            url=url, final_url=url, status=None, content_type="", body=b"", nbytes=0,
            truncated=False, elapsed_ms=0, redirects=[], error="", error_kind="",
        )  # fmt: skip
        try:
            response = self._follow(url, result, proxy, deadline)
            body = self._read_body(response, max_bytes, deadline)
            result.body, result.truncated = body.data, body.truncated
            result.nbytes = body.wire_bytes
            if body.error:
                raise body.error
        except FetchError as exc:
            result.error, result.error_kind = exc.message, exc.kind
        result.elapsed_ms = int((time.monotonic() - started) * 1000)
        # A partial page (cut off, or broken mid-way) is not parsed: its links would be a
        # random subset, and a retry or the truncation counter says more than they would.
        complete = not result.error and not result.truncated
        if parse and complete and links.is_html(result.content_type):
            result.title, result.links = links.extract(
                result.body, result.final_url, result.content_type
            )
        return result

    def _follow(
        self, url: str, result: FetchResult, proxy: str | None, deadline: float
    ) -> requests.Response:
        """The final response (body unread), recording each redirect in `result`."""
        if problem := url_problem(url):
            raise FetchError(f"{problem}: {url[:200]!r}", "invalid")
        current = url
        while True:
            try:
                if self.guard is not None:
                    self.guard(current)
            except BlockedAddress as exc:
                raise FetchError(f"blocked: {exc}", "blocked") from None
            response = self._get(current, proxy, deadline)
            result.final_url = current
            result.status = response.status_code
            result.content_type = response.headers.get("Content-Type", "").strip()
            result.headers = {k.lower(): v for k, v in response.headers.items()}
            if proxy and response.status_code == 407:
                response.close()
                raise FetchError("proxy refused: 407 Proxy Authentication Required", "proxy")
            location = response.headers.get("Location", "")
            if response.status_code not in REDIRECT_STATUSES or not location.strip():
                return response
            self._read_body(response, REDIRECT_BODY_LIMIT, deadline)  # frees the connection
            if len(result.redirects) >= self.max_redirects:
                raise FetchError(f"too many redirects (over {self.max_redirects})", "redirects")
            current = _redirect_target(current, location)
            result.redirects.append(current)

    def _get(self, url: str, proxy: str | None, deadline: float) -> requests.Response:
        """One GET, redirects not followed (we follow them ourselves to record and check each
        hop), body not read.

        What session.get(url, allow_redirects=False, stream=True) does, through the same
        adapter, with the same prepared request and the session's cookies, minus the parts
        that cost ~100 us a fetch and do nothing here: merging settings and hooks that are all
        empty, copying the cookie jar, and computing the next request of a redirect (which
        also read the whole redirect body, past REDIRECT_BODY_LIMIT).
        """
        timeout = self._io_timeout(deadline)
        session = self.session
        try:
            prepared = requests.PreparedRequest()
            headers = CaseInsensitiveDict(session.headers)
            headers["User-Agent"] = pick_user_agent(self.user_agent_mode, self.user_agent)
            prepared.prepare(
                method="GET", url=url, headers=headers, cookies=session.cookies, hooks={}
            )
            _deadlines.value = deadline
            response = session.get_adapter(prepared.url).send(
                prepared,
                stream=True,
                timeout=(timeout, timeout),
                verify=True,
                cert=None,
                proxies={"http": proxy, "https": proxy} if proxy else {},
            )
            extract_cookies_to_jar(session.cookies, prepared, response.raw)
            return response
        except (requests.RequestException, urllib3.exceptions.HTTPError) as exc:
            if time.monotonic() >= deadline:  # the watchdog cut a response head short
                raise self._deadline_error() from None
            raise self._classify(exc, url, timeout) from None
        except (OSError, ValueError, http.client.HTTPException) as exc:
            if time.monotonic() >= deadline:
                raise self._deadline_error() from None
            raise FetchError(f"request failed: {_describe(exc)}", "connection") from None
        finally:
            _deadlines.value = None

    def _io_timeout(self, deadline: float) -> float:
        """The socket timeout for the next step: the usual one, or less near the deadline."""
        remaining = deadline - time.monotonic()
        if remaining <= 0.001:
            raise self._deadline_error()
        return min(self.timeout, remaining)

    def _deadline_error(self) -> FetchError:
        return FetchError(f"timeout after {self.total_timeout:g} s (whole fetch)", "timeout")

    def _timeout_error(self, used: float, phase: str) -> FetchError:
        if used < self.timeout:
            return self._deadline_error()
        return FetchError(f"timeout after {used:g} s ({phase})", "timeout")

    def _classify(self, exc: Exception, url: str, timeout: float) -> FetchError:
        chain = _causes(exc)
        if isinstance(exc, requests.exceptions.ProxyError):
            return FetchError(_proxy_message(chain), "proxy")
        if isinstance(exc, requests.exceptions.ConnectTimeout):
            return self._timeout_error(timeout, "connecting")
        if isinstance(exc, requests.exceptions.Timeout):
            return self._timeout_error(timeout, "waiting for the response")
        if isinstance(exc, requests.exceptions.SSLError):
            return FetchError(f"TLS error: {_describe(chain[-1])}", "connection")
        if isinstance(exc, requests.exceptions.ConnectionError):
            return _connection_error(chain, url)
        if isinstance(exc, (requests.exceptions.InvalidURL, requests.exceptions.InvalidSchema)):
            return FetchError(f"invalid URL {url[:200]!r}: {_describe(exc)}", "invalid")
        if isinstance(exc, (requests.exceptions.InvalidHeader, ValueError)):
            return FetchError(f"invalid request: {_describe(exc)}", "invalid")
        return FetchError(f"request failed: {_describe(chain[-1])}", "connection")

    def _read_body(self, response: requests.Response, max_bytes: int, deadline: float) -> _Body:
        """Up to max_bytes of decoded body; stops early on the deadline or a broken stream."""
        raw = response.raw
        body = _Body()
        chunks: list[bytes] = []
        size = 0
        timeout = self.timeout
        try:
            while True:
                timeout = self._io_timeout(deadline)
                _set_socket_timeout(raw, timeout)
                # read1 returns after one socket read, so the deadline is checked between
                # trickled bytes; decoded output per call is capped, which defuses gzip bombs.
                chunk = raw.read1(min(CHUNK, max_bytes + 1 - size), decode_content=True)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
                if size > max_bytes:
                    body.truncated = True
                    break
        except FetchError as exc:
            body.error = exc
        except (TimeoutError, urllib3.exceptions.ReadTimeoutError):
            body.error = self._timeout_error(timeout, "reading the body")
        except urllib3.exceptions.DecodeError as exc:
            body.error = FetchError(f"could not decode the body: {_describe(exc)}", "invalid")
        except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError, ValueError):
            body.error = FetchError("incomplete body", "connection")
        body.data = b"".join(chunks)[:max_bytes]
        body.wire_bytes = raw.tell()
        if body.error or body.truncated:
            response.close()  # drop the connection: the rest of the body is never read
        else:
            raw.release_conn()  # read to the end: the connection goes back to the pool
        return body


class _Watchdog:
    """Shuts the socket of a fetch still waiting for its response head after its deadline.

    The read timeout restarts on every byte, so a server that trickles its status line and
    headers would otherwise hold a fetch thread (and the slice waiting for it) for as long as
    it liked; the body is bounded by Fetcher._read_body itself. One thread per process, started
    when first needed; a forked worker starts afresh (it inherits neither the thread nor,
    safely, a lock another thread held at the fork).
    """

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self.cond = threading.Condition()
        self.watched: dict[int, tuple[float, urllib3.connection.HTTPConnection]] = {}
        self.wake_at = 0.0  # when the thread next looks; woken early only for a sooner deadline
        self.started = False

    def watch(self, conn: urllib3.connection.HTTPConnection, deadline: float) -> None:
        with self.cond:
            if not self.started:
                self.started = True
                threading.Thread(target=self._run, name="fetch-watchdog", daemon=True).start()
            self.watched[id(conn)] = (deadline, conn)
            if deadline < self.wake_at:
                self.cond.notify()

    def unwatch(self, conn: urllib3.connection.HTTPConnection) -> None:
        with self.cond:
            self.watched.pop(id(conn), None)

    def _run(self) -> None:
        with self.cond:
            while True:
                now = time.monotonic()
                for key, (deadline, conn) in list(self.watched.items()):
                    if deadline <= now:
                        del self.watched[key]
                        _shut(conn)
                self.wake_at = min((d for d, _ in self.watched.values()), default=now + 60)
                self.cond.wait(timeout=max(0.01, self.wake_at - now))


def _shut(conn: urllib3.connection.HTTPConnection) -> None:
    """Wake a thread blocked reading conn: its recv returns as if the server had closed."""
    sock = getattr(conn, "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


_WATCHDOG = _Watchdog()
_deadlines = threading.local()  # .value: the running fetch's deadline, in this thread


class _Watched:
    """An HTTP(S) connection whose wait for a response head ends at the fetch's deadline."""

    def getresponse(self, *args, **kwargs):
        deadline = getattr(_deadlines, "value", None)
        if deadline is None:
            return super().getresponse(*args, **kwargs)
        _WATCHDOG.watch(self, deadline)
        try:
            return super().getresponse(*args, **kwargs)
        finally:
            _WATCHDOG.unwatch(self)


class _WatchedHTTPConnection(_Watched, urllib3.connection.HTTPConnection):
    pass


class _WatchedHTTPSConnection(_Watched, urllib3.connection.HTTPSConnection):
    pass


class _WatchedHTTPPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


_WATCHED_POOLS = {"http": _WatchedHTTPPool, "https": _WatchedHTTPSPool}


class _Adapter(HTTPAdapter):
    """requests' adapter with connections that honour the whole-fetch deadline (_Watchdog),
    direct and through proxies."""

    def init_poolmanager(self, *args, **kwargs) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _WATCHED_POOLS

    def proxy_manager_for(self, proxy, **proxy_kwargs):
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        manager.pool_classes_by_scheme = _WATCHED_POOLS
        return manager


def _session(pool_size: int) -> requests.Session:
    session = requests.Session()
    # No proxies, .netrc or CA bundle from the environment: a crawl's behaviour must not
    # depend on the shell the worker happened to start in; proxies come per request.
    session.trust_env = False
    adapter = _Adapter(pool_connections=pool_size, pool_maxsize=pool_size, max_retries=0)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    session.headers.update({"Accept": ACCEPT, "Accept-Encoding": ACCEPT_ENCODING})
    return session


def _redirect_target(current: str, location: str) -> str:
    """The absolute http(s) URL a Location header points at, or FetchError."""
    # Servers send UTF-8 in Location, which http.client decoded as Latin-1 (as requests does).
    with contextlib.suppress(UnicodeError):
        location = location.encode("latin-1").decode("utf-8")
    target = links.absolute_url(location, current)
    if target is None:
        try:
            shown = urljoin(current, location.strip())
        except ValueError:
            shown = location.strip()
        raise FetchError(f"redirect to a non-http URL: {shown[:200]}", "redirects")
    return target


def _set_socket_timeout(raw: urllib3.response.HTTPResponse, timeout: float) -> None:
    """Shrink the socket timeout for the next read (urllib3 resets it when reusing a socket)."""
    sock = getattr(raw.connection, "sock", None)
    if sock is not None:
        sock.settimeout(timeout)


def _causes(exc: BaseException) -> list[BaseException]:
    """`exc` and what it wraps (args, .reason, __cause__, __context__), outermost first."""
    seen: list[BaseException] = []
    todo = [exc]
    while todo and len(seen) < 20:
        current = todo.pop(0)
        if any(current is s for s in seen):
            continue
        seen.append(current)
        inner = [getattr(current, "reason", None), current.__cause__, current.__context__]
        inner += list(current.args)
        todo += [e for e in inner if isinstance(e, BaseException)]
    return seen


def _connection_error(chain: list[BaseException], url: str) -> FetchError:
    if any(isinstance(e, urllib3.exceptions.NameResolutionError) for e in chain) or any(
        isinstance(e, socket.gaierror) for e in chain
    ):
        return FetchError(f"DNS lookup failed for {_host(url)}", "dns")
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return FetchError("connection refused", "refused")
    if any(isinstance(e, http.client.RemoteDisconnected) for e in chain):
        return FetchError("connection closed by the server without a response", "connection")
    return FetchError(f"connection failed: {_describe(chain[-1])}", "connection")


def _proxy_message(chain: list[BaseException]) -> str:
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return "proxy refused the connection"
    if any(isinstance(e, (urllib3.exceptions.NameResolutionError, socket.gaierror)) for e in chain):
        return "DNS lookup failed for the proxy"
    if any(isinstance(e, TimeoutError) for e in chain):
        return "proxy timed out"
    # Tunnel failures ("Tunnel connection failed: 407 ...") carry the useful text innermost.
    return f"proxy failed: {_describe(chain[-1])}"


def _host(url: str) -> str:
    try:
        return urlsplit(url).hostname or url
    except ValueError:
        return url


def _describe(exc: BaseException) -> str:
    """A short, one-line text for an exception (urllib3's reprs carry object addresses)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]
