"""The HTTP client both apps use: crawl pages, robots.txt, proxy lists, proxy checks, webhooks.

What every request needs is decided here, once, for every caller:
- the private-network guard (netguard, CRAWLHUB_BLOCK_PRIVATE_NETWORKS) is asked for the first
  URL and for every redirect hop; refusal() gives its answer to a caller ahead of a fetch;
- time: (connect, read) timeouts, and a deadline for the whole fetch (deadline.py);
- size: at most max_bytes of decoded body, read and decoded in bounded steps (bodies.py),
  which also defuses gzip and deflate bombs;
- redirects: a GET follows up to max_redirects, checking and recording each hop; a POST none;
  a crawl's page fetch none either (fetch(follow_redirects=False)): its 3xx is the answer, with
  the target it points at (FetchResult.redirect_to), which the crawl schedules like a link.

A fetch never raises for what a network or a server does. Network trouble, hostile servers
(endless redirects, bodies that never end, gzip bombs, bytes trickled one per second) and odd
content become FetchResult.error and error_kind (errors.py), so a caller counts, retries or
gives up without a try/except of its own.
"""

from __future__ import annotations

import contextlib
import http.client
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import requests
import urllib3.exceptions
from requests.cookies import extract_cookies_to_jar
from requests.structures import CaseInsensitiveDict

from crawlhub.http import bodies, links, netguard
from crawlhub.http.deadline import arm, disarm, set_socket_timeout
from crawlhub.http.errors import (
    FetchError,
    classify,
    deadline_error,
    describe,
    timeout_error,
)
from crawlhub.http.fetch_result import FetchResult
from crawlhub.http.redirects import REDIRECT_STATUSES, located, redirect_target
from crawlhub.http.session import (
    PreparedHeaders,
    new_session,
    prepare_without_cookies,
    unguarded,
)
from crawlhub.http.urls import URLError, normalize, problem_of
from crawlhub.http.useragents import MODES, pick_user_agent
from crawlhub.http.wire import exchange_of, recorded_headers

ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
# Only what bodies.py decodes, in bounded steps.
ACCEPT_ENCODING = "gzip, deflate"
# A redirect's own body is read (to keep the connection pooled) only when it is this small.
REDIRECT_BODY_LIMIT = 16 * 1024


class OptionError(ValueError):
    """A Fetcher option that cannot be used; `option` names it, and so does the message."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{option}: {message}")
        self.option = option
        self.message = message  # without the option's name


def refusal(url: str) -> str:
    """Why the client refuses to fetch `url` ("blocked: <reason>"), or "" when it would.

    The private-network guard, when CRAWLHUB_BLOCK_PRIVATE_NETWORKS is on. Every fetch asks it
    for its first URL and every redirect hop; a caller that does work for a URL before fetching
    it (a crawl reads the host's robots.txt first) asks it too.
    """
    try:
        netguard.guard_url(url)
    except netguard.BlockedAddress as exc:
        return f"blocked: {exc}"
    return ""


@dataclass(frozen=True)
class _Call:
    """What one fetch sends, and whether it follows redirects and guards its first URL."""

    method: str = "GET"
    body: bytes | None = None
    headers: Mapping[str, str] | None = None
    follow: bool = True
    # Not following: still read where a redirect points (FetchResult.redirect_to), and refuse
    # a target that is not http(s) as following would.
    locate: bool = False
    guard_first: bool = True  # False only for the operator's own URL (Fetcher.get)
    # More header names whose values are never recorded (a crawl's own credentials).
    secret: frozenset[str] = frozenset()
    # Headers for each hop's own URL (a crawl's credentials: for its own hosts, and none for a
    # redirect that leaves them), asked again at every hop.
    headers_for: Callable[[str], Mapping[str, str]] | None = None


_GET = _Call()
_OPERATOR_GET = _Call(guard_first=False)
_POST_HEADERS = {"Accept": "*/*"}


@dataclass
class _Body:
    data: bytes = b""
    truncated: bool = False
    wire_bytes: int = 0
    error: FetchError | None = None


class Fetcher:
    """One requests.Session with a connection pool, shared by the threads of its user."""

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
    ) -> None:
        self.check_options(
            timeout=timeout,
            max_bytes=max_bytes,
            user_agent_mode=user_agent_mode,
            user_agent=user_agent,
            pool_size=pool_size,
            max_redirects=max_redirects,
        )
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.user_agent_mode = user_agent_mode
        self.user_agent = user_agent
        self.max_redirects = max_redirects
        # The (connect, read) timeouts restart on every byte, so a trickling server could
        # otherwise hold a thread for as long as it likes.
        self.total_timeout = total_timeout if total_timeout else 3 * timeout
        self.session = new_session(pool_size)
        self.session.headers.update({"Accept": ACCEPT, "Accept-Encoding": ACCEPT_ENCODING})
        # The session's headers, set once, as a plain dict: every fetch starts from them.
        self._plain_headers = dict(self.session.headers)
        # The (connect, read) timeouts far from the deadline, made once: requests would make
        # them of a tuple, checking each value, per fetch (urllib3 uses a copy).
        self._usual = urllib3.Timeout(connect=timeout, read=timeout)
        # The session's headers and a User-Agent, as requests prepares them, made once.
        self._own_headers = PreparedHeaders(self._plain_headers)

    @staticmethod
    def check_options(
        *,
        timeout: float,
        max_bytes: int,
        user_agent_mode: str = "random",
        user_agent: str = "",
        pool_size: int = 16,
        max_redirects: int = 10,
    ) -> None:
        """OptionError for an option no fetch could work with. The constructor calls it; so can
        whoever takes the options from people, to refuse them where they are entered."""
        positive = {"timeout": timeout, "max_bytes": max_bytes, "pool_size": pool_size}
        for name, value in positive.items():
            if not value > 0:  # NaN included
                raise OptionError(name, f"must be more than 0, not {value!r}")
        if max_redirects < 0:
            raise OptionError("max_redirects", f"must be 0 or more, not {max_redirects!r}")
        if "\r" in user_agent or "\n" in user_agent:
            raise OptionError("user_agent", "must be a single line")
        if unsendable := [char for char in user_agent if ord(char) > 255]:
            raise OptionError(
                "user_agent", f"{unsendable[0]!r} cannot be sent in an HTTP header (Latin-1 only)"
            )
        if user_agent_mode not in MODES:
            raise OptionError(
                "user_agent_mode", f"{user_agent_mode!r} is not one of {', '.join(MODES)}"
            )

    def fetch(
        self,
        url: str,
        *,
        proxy: str | None = None,
        headers: Mapping[str, str] | None = None,
        follow_redirects: bool = True,
        secret_headers: frozenset[str] = frozenset(),
    ) -> FetchResult:
        """A page for a crawl: GET `url` (through `proxy` if given), following redirects, with
        its title and links when it is complete HTML. `headers` are sent as well (a
        conditional request's If-None-Match, say); the values of those named in
        `secret_headers` (lowercase) are masked in FetchResult.request_headers, like
        wire.SECRET_HEADERS.

        With follow_redirects=False (a crawl's own pages: crawls/engine/slices.py), a redirect
        is the answer, like any other status, and its target is in FetchResult.redirect_to: the
        crawl schedules it through its dedup set rather than fetching it here. A Location that
        is not an http(s) URL is the same error as when following.
        """
        if follow_redirects:
            call = _Call(headers=headers, secret=secret_headers) if headers else _GET
        else:
            call = _Call(headers=headers, follow=False, locate=True, secret=secret_headers)
        return self._fetch(url, proxy=proxy, max_bytes=self.max_bytes, parse=True, call=call)

    def fetch_text(
        self,
        url: str,
        *,
        limit: int = 512 * 1024,
        proxy: str | None = None,
        headers_for: Callable[[str], Mapping[str, str]] | None = None,
    ) -> tuple[int | None, str]:
        """(status, text) for robots.txt; status None when the server could not be read.
        `headers_for(url)`: more headers for each hop (see get()).

        A redirect that could not be followed keeps its 3xx status (RFC 9309 treats that like
        an unavailable file); any other error reads as "no response".
        """
        status, text, _result = self.read_text(
            url, limit=limit, proxy=proxy, headers_for=headers_for
        )
        return status, text

    def read_text(
        self,
        url: str,
        *,
        limit: int = 512 * 1024,
        proxy: str | None = None,
        headers_for: Callable[[str], Mapping[str, str]] | None = None,
    ) -> tuple[int | None, str, FetchResult]:
        """fetch_text, and the fetch itself: what went wrong when no response came."""
        call = _Call(headers_for=headers_for) if headers_for else _GET
        result = self._fetch(url, proxy=proxy, max_bytes=limit, parse=False, call=call)
        if result.error_kind == "redirects":
            return result.status, "", result
        if result.error or result.status is None:
            return None, "", result
        return result.status, result.body.decode("utf-8", "replace").lstrip("\ufeff"), result

    def get(
        self,
        url: str,
        *,
        proxy: str | None = None,
        operator_url: bool = False,
        max_bytes: int | None = None,
        headers_for: Callable[[str], Mapping[str, str]] | None = None,
        secret_headers: frozenset[str] = frozenset(),
    ) -> FetchResult:
        """GET `url` as fetch() does, without looking for links: a proxy list, a check URL's
        JSON (FetchResult.json()), a sitemap (with its own max_bytes).

        operator_url=True says `url` is the operator's own setting (PROXY_CHECK_URL, by default
        crawlhub's own /proxies/echo on loopback), not a URL a user or a page named: the
        private-network guard lets that first URL through, and still checks every redirect
        hop. Proxy checks are the one caller that passes it.

        headers_for(url), when given, adds headers to each hop's request for that hop's URL (a
        crawl's credentials for a sitemap of its own hosts: none for a hop elsewhere); their
        names in `secret_headers` (lowercase) are masked in FetchResult.request_headers.
        """
        call = _OPERATOR_GET if operator_url else _GET
        if headers_for:
            call = replace(call, headers_for=headers_for, secret=secret_headers)
        limit = self.max_bytes if max_bytes is None else max_bytes
        return self._fetch(url, proxy=proxy, max_bytes=limit, parse=False, call=call)

    def post(self, url: str, *, body: bytes, headers: Mapping[str, str]) -> FetchResult:
        """POST `body` to `url` with `headers`; at most max_bytes of the answer are read.

        Redirects are not followed: a 3xx is the answer, like any other status (a POST cannot
        safely be sent on to wherever a server points).
        """
        call = _Call(method="POST", body=body, headers={**_POST_HEADERS, **headers}, follow=False)
        return self._fetch(url, proxy=None, max_bytes=self.max_bytes, parse=False, call=call)

    def send(
        self,
        url: str,
        *,
        method: str,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        proxy: str | None = None,
    ) -> FetchResult:
        """One request of any method (a rendered page's script asks for it: render_routing.py),
        through `proxy`, its redirect not followed (the answer says where it points), its body
        read up to max_bytes; by the same path as every fetch: the guard, the deadline."""
        call = _Call(method=method, body=body, headers=headers, follow=False)
        return self._fetch(url, proxy=proxy, max_bytes=self.max_bytes, parse=False, call=call)

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> Fetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _fetch(
        self, url: str, *, proxy: str | None, max_bytes: int, parse: bool, call: _Call = _GET
    ) -> FetchResult:
        started = time.monotonic()
        deadline = started + self.total_timeout
        result = FetchResult(
            url=url,
            final_url=url,
            status=None,
            content_type="",
            body=b"",
            nbytes=0,
            truncated=False,
            elapsed_ms=0,
            redirects=[],
            error="",
            error_kind="",
        )
        try:
            response = self._follow(url, result, proxy, deadline, call)
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
            result.title, result.links, result.link_texts = links.extract_with_texts(
                result.body, result.final_url, result.content_type
            )
        return result

    def _follow(
        self, url: str, result: FetchResult, proxy: str | None, deadline: float, call: _Call
    ) -> requests.Response:
        """The final response (body unread), recording each redirect in `result`.

        What is sent is `url` in normal form (urls.normalize): the guard, and every hop's
        check, read the host the socket connects to."""
        try:  # read once: url_problem() and then normalize() read it twice
            current = normalize(url, userinfo=True)
        except URLError as exc:
            raise FetchError(f"{problem_of(exc)}: {url[:200]!r}", "invalid") from None
        guarded = call.guard_first
        while True:
            if guarded and (refused := refusal(current)):
                raise FetchError(refused, "blocked")
            response, sent = self._send(current, proxy, deadline, call, guarded)
            guarded = True  # every redirect hop, whoever named the first URL
            result.final_url = current
            result.status = response.status_code
            result.content_type = response.headers.get("Content-Type", "").strip()
            result.headers = dict(response.headers.lower_items())
            result.request_headers = recorded_headers(sent.headers, call.secret)
            result.exchange = exchange_of(sent, result.request_headers, response)
            if proxy and response.status_code == 407:
                response.close()
                raise FetchError("proxy refused: 407 Proxy Authentication Required", "proxy")
            location = response.headers.get("Location", "")
            if not (response.status_code in REDIRECT_STATUSES and location.strip()):
                return response
            if not call.follow:
                if call.locate:
                    result.redirect_to = located(response, current, location)
                return response
            self._read_body(response, REDIRECT_BODY_LIMIT, deadline)  # frees the connection
            if len(result.redirects) >= self.max_redirects:
                raise FetchError(f"too many redirects (over {self.max_redirects})", "redirects")
            current = redirect_target(current, location)
            result.redirects.append(current)

    def _send(
        self, url: str, proxy: str | None, deadline: float, call: _Call, guarded: bool
    ) -> tuple[requests.Response, requests.PreparedRequest]:
        """One request, redirects not followed (we follow them ourselves to record and check
        each hop), body not read; and the request as it was sent.

        What session.request(..., allow_redirects=False, stream=True) does, through the same
        adapter, with the same prepared request and the session's cookies, minus the parts
        that cost ~100 us a fetch and do nothing here: merging settings and hooks that are all
        empty, copying the cookie jar, and computing the next request of a redirect (which
        also read the whole redirect body, past REDIRECT_BODY_LIMIT).
        """
        timeout = self._io_timeout(deadline)
        session = self.session
        try:
            prepared = requests.PreparedRequest()
            agent = pick_user_agent(self.user_agent_mode, self.user_agent)
            headers = None
            if call.headers or call.headers_for:
                headers = CaseInsensitiveDict(self._plain_headers)
                headers["User-Agent"] = agent
                if call.headers:
                    headers.update(call.headers)
                if call.headers_for:
                    headers.update(call.headers_for(url))
            jar = session.cookies
            if next(iter(jar), None) is not None:
                if headers is None:  # the session's names as requests spells them
                    headers = {**self._plain_headers, "User-Agent": agent}
                prepared.prepare(
                    method=call.method,
                    url=url,
                    headers=headers,
                    data=call.body,
                    cookies=jar,
                    hooks={},
                )
            elif headers is not None:
                prepare_without_cookies(prepared, call.method, url, headers, call.body)
            else:
                own = self._own_headers.with_user_agent(agent)
                prepare_without_cookies(prepared, call.method, url, own, call.body, checked=True)
            arm(deadline)
            with contextlib.nullcontext() if guarded else unguarded():
                response = session.get_adapter(prepared.url).send(
                    prepared,
                    stream=True,
                    timeout=self._usual if timeout == self.timeout else (timeout, timeout),
                    verify=True,
                    cert=None,
                    proxies={"http": proxy, "https": proxy} if proxy else {},
                )
            # The jar reads Set-Cookie only (the policy's RFC 2965 is off: no Set-Cookie2).
            if "Set-Cookie" in response.raw.headers:
                extract_cookies_to_jar(session.cookies, prepared, response.raw)
            return response, prepared
        except netguard.BlockedAddress as exc:  # at connection time (session.py)
            raise FetchError(f"blocked: {exc}", "blocked") from None
        except (requests.RequestException, urllib3.exceptions.HTTPError) as exc:
            if time.monotonic() >= deadline:  # the watchdog cut a response head short
                raise deadline_error(self.total_timeout) from None
            raise classify(
                exc, url=url, used=timeout, timeout=self.timeout, total_timeout=self.total_timeout
            ) from None
        except (OSError, ValueError, http.client.HTTPException) as exc:
            if time.monotonic() >= deadline:
                raise deadline_error(self.total_timeout) from None
            raise FetchError(f"request failed: {describe(exc)}", "connection") from None
        finally:
            disarm()

    def _io_timeout(self, deadline: float) -> float:
        """The socket timeout for the next step: the usual one, or less near the deadline."""
        remaining = deadline - time.monotonic()
        if remaining <= 0.001:
            raise deadline_error(self.total_timeout)
        return min(self.timeout, remaining)

    def _read_body(self, response: requests.Response, max_bytes: int, deadline: float) -> _Body:
        """Up to max_bytes of decoded body; stops early on the deadline or a broken stream."""
        raw = response.raw
        body = _Body()
        timeout = self.timeout

        def before_read() -> None:
            nonlocal timeout
            timeout = self._io_timeout(deadline)
            set_socket_timeout(raw, timeout)

        read = bodies.read(
            raw,
            max_bytes=max_bytes,
            before_read=before_read,
            content_encoding=response.headers.get("Content-Encoding", ""),
        )
        body.data, body.truncated, body.wire_bytes = read.data, read.truncated, read.wire_bytes
        try:
            if read.error is not None:
                raise read.error
        except FetchError as exc:
            body.error = exc
        except (TimeoutError, urllib3.exceptions.ReadTimeoutError):
            body.error = timeout_error(
                timeout, "reading the body", timeout=self.timeout, total_timeout=self.total_timeout
            )
        except bodies.DecodeError as exc:
            body.error = FetchError(f"could not decode the body: {describe(exc)}", "invalid")
        except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError, ValueError):
            body.error = FetchError("incomplete body", "connection")
        if body.error or body.truncated:
            response.close()  # drop the connection: the rest of the body is never read
        else:
            raw.release_conn()  # read to the end: the connection goes back to the pool
        return body
