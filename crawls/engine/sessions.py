"""The login step, and the session it gets, shared by every worker of a crawl.

The login step (log_in): GET the login URL; take the form on it (the first with a password
field, else the first form) with its hidden inputs (a CSRF token, say); POST them with the
crawl's login fields to the form's action; follow redirects on the login URL's host only (a
redirect elsewhere ends the step with an error: the credentials never leave the crawl's own
hosts). It succeeded when the page it ends on
- has the success selector (login_check_selector), when one is given;
- is the success URL (login_check_url: same host and path), when one is given;
- with neither, answered below 400 and is not the login page again.
The cookies it collected are the session.

The session (SharedSession) lives in the crawl's Redis hash ("session": a generation number and
the cookies), so that a worker that starts later, on any machine, uses it without logging in.
A crawled page shows that the session expired when it redirects to the login URL (same host
and path, whatever the query): the worker then renews the session and fetches the page once
more. Renewing names the generation that failed: the first worker to ask takes a lock in Redis
and logs in again; those that asked with the same generation wait and then take the new
session, so many workers seeing the expiry together cause one login. A failed login is kept in
the hash for LOGIN_FAILURE_SECONDS, and workers asking meanwhile get that error rather than
hammering the site's login form.

The login step's requests take their turn at their host like the crawl's own (HostTurns): each
waits for the host's delay, a push-back's included, and the delay runs from it again, so that a
renewal in the middle of a crawl does not ask the host three times at once (the page, the login
form, the post) where the crawl promised one request per delay. So does the page fetched again
after the renewal.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from urllib.parse import urlencode, urljoin, urlsplit

from lxml import html as lxml_html
from parsel import Selector

from crawlhub.http import Fetcher, FetchResult
from crawlhub.http.client import REDIRECT_STATUSES
from crawls.engine.crawl_log import SliceLog
from crawls.engine.credentials import Cookie, Credentials, origin
from crawls.engine.frontier import Frontier
from crawls.engine.request import request_host
from crawls.models import CrawlEvent

log = logging.getLogger(__name__)

MAX_LOGIN_REDIRECTS = 10
LOGIN_LOCK_SECONDS = 120.0
LOGIN_FAILURE_SECONDS = 30.0
# The longest a login request waits for its host's turn (a long push-back): well under the
# login lock, so that the workers waiting for this login do not take it over meanwhile.
TURN_WAIT_SECONDS = 60.0
_FORM_TYPE = "application/x-www-form-urlencoded"
_NOT_SENT = frozenset({"submit", "button", "image", "reset", "file"})


class LoginFailed(Exception):
    """The login step did not succeed; the message says where and why, never a secret."""


def _same_host(credentials: Credentials, url: str) -> bool:
    here, there = origin(credentials.login_url), origin(url)
    return bool(here and there and here[1] == there[1] and credentials.sends_to(url))


class HostTurns:
    """Fetches made outside a page's own turn (the login step, and the page fetched again after
    it) keep their host's delay: wait until the host may be asked (Frontier.pace), then the
    delay runs from the request and again from its answer (Frontier.paced)."""

    def __init__(self, frontier: Frontier, *, max_wait: float = TURN_WAIT_SECONDS) -> None:
        self.frontier = frontier
        self.max_wait = max_wait

    @contextmanager
    def turn(self, url: str) -> Iterator[None]:
        host = request_host(url)
        deadline = time.monotonic() + self.max_wait
        while (wait := self.frontier.pace(host)) > 0:
            if time.monotonic() + wait > deadline:
                raise LoginFailed(
                    f"{host} asks for {wait:.0f} s more before its next request; the login "
                    f"step waits at most {self.max_wait:.0f} s"
                )
            time.sleep(wait)
        try:
            yield
        finally:
            self.frontier.paced(host)


class _Step:
    """One login step's requests: the cookies they collect, and the redirects they follow."""

    def __init__(
        self, fetcher: Fetcher, credentials: Credentials, turns: HostTurns | None = None
    ) -> None:
        self.fetcher = fetcher
        self.credentials = credentials
        self.turns = turns
        self.cookies: dict[tuple[str, str, str], Cookie] = {}

    def _turn(self, url: str):
        return self.turns.turn(url) if self.turns else nullcontext()

    def session(self) -> list[Cookie]:
        return list(self.cookies.values())

    def _keep_cookies(self, url: str) -> None:
        """What the responses set, from the fetcher's jar (its own, for this step)."""
        host = origin(url)[1]
        for jarred in self.fetcher.session.cookies:
            cookie = Cookie(
                name=jarred.name,
                value=jarred.value or "",
                domain=jarred.domain.lstrip(".") if jarred.domain_specified else host,
                subdomains=bool(jarred.domain_specified),
                path=jarred.path or "/",
                secure=bool(jarred.secure),
            )
            self.cookies[(cookie.domain, cookie.path, cookie.name)] = cookie

    def headers(self, url: str) -> dict[str, str]:
        return self.credentials.headers_for(url, self.session())

    def get(self, url: str) -> FetchResult:
        """GET `url`, following redirects on the login URL's host only."""
        for _ in range(MAX_LOGIN_REDIRECTS + 1):
            with self._turn(url):
                result = self.fetcher.fetch(url, headers=self.headers(url), follow_redirects=False)
            self._keep_cookies(url)
            if result.error:
                raise LoginFailed(f"the login step could not read {url[:200]}: {result.error}")
            if not result.redirect_to:
                return result
            url = self._next(result.redirect_to)
        raise LoginFailed(f"the login step was redirected more than {MAX_LOGIN_REDIRECTS} times")

    def post(self, url: str, fields: list[tuple[str, str]]) -> FetchResult:
        body = urlencode(fields).encode()
        headers = {**self.headers(url), "Content-Type": _FORM_TYPE}
        with self._turn(url):
            result = self.fetcher.post(url, body=body, headers=headers)
        self._keep_cookies(url)
        if result.error:
            raise LoginFailed(f"the login form could not be sent to {url[:200]}: {result.error}")
        location = result.headers.get("location", "").strip()
        if result.status in REDIRECT_STATUSES and location:
            return self.get(self._next(urljoin(url, location)))  # a 303 in effect: GET
        return result

    def _next(self, target: str) -> str:
        if not _same_host(self.credentials, target):
            raise LoginFailed(
                f"the login step was redirected to another host ({target[:200]}); not followed: "
                "the credentials stay on the login URL's host"
            )
        return target


def _form(page: FetchResult, credentials: Credentials) -> tuple[str, list[tuple[str, str]]]:
    """Where the login form posts to, and what it sends besides the crawl's fields."""
    try:
        forms = lxml_html.fromstring(page.body or b"<html></html>").forms
    except Exception:  # noqa: BLE001 - lxml on whatever a site sends; no form then
        forms = []
    with_password = [f for f in forms if f.xpath(".//input[@type='password']")]
    form = (with_password or forms or [None])[0]
    if form is None:
        return page.final_url, []
    action = urljoin(page.final_url, form.get("action") or page.final_url)
    given = {name for name, _ in credentials.login_fields}
    kept = []
    for element in form.inputs:
        name, kind = element.get("name"), (element.get("type") or "text").lower()
        if not name or name in given or kind in _NOT_SENT or element.tag != "input":
            continue
        if kind in ("checkbox", "radio") and element.get("checked") is None:
            continue
        kept.append((name, element.get("value") or ""))
    return action, kept


def _check(result: FetchResult, credentials: Credentials) -> None:
    """LoginFailed unless the page the step ended on says it succeeded (module docstring)."""
    where = f"{result.final_url[:200]} (status {result.status})"
    if selector := credentials.login_check_selector:
        found = Selector(text=result.text() or "<html></html>").css(selector)
        if not found:
            raise LoginFailed(f"the login did not succeed: {selector!r} is not on {where}")
    if url := credentials.login_check_url:
        target, landed = urlsplit(url), urlsplit(result.final_url)
        if origin(url) != origin(result.final_url) or target.path != landed.path:
            raise LoginFailed(f"the login did not succeed: it ended on {where}, not on {url}")
    if not (credentials.login_check_selector or credentials.login_check_url):
        if result.status is None or result.status >= 400:
            raise LoginFailed(f"the login did not succeed: it ended on {where}")
        if credentials.is_login_url(result.final_url):
            raise LoginFailed(f"the login did not succeed: it ended on the login page, {where}")


def log_in(
    fetcher: Fetcher, credentials: Credentials, turns: HostTurns | None = None
) -> list[Cookie]:
    """Run the login step with `fetcher` (its own: its cookie jar is the step's), each request
    taking its turn at its host when `turns` is given; the session's cookies, or LoginFailed."""
    step = _Step(fetcher, credentials, turns)
    page = step.get(credentials.login_url)
    if page.status is None or page.status >= 400:
        raise LoginFailed(f"the login page {credentials.login_url[:200]} answered {page.status}")
    action, hidden = _form(page, credentials)
    if not _same_host(credentials, action):
        raise LoginFailed(
            f"the login form posts to another host ({action[:200]}); not sent: the credentials "
            "stay on the login URL's host"
        )
    _check(step.post(action, hidden + list(credentials.login_fields)), credentials)
    return step.session()


class SharedSession:
    """The crawl's login session, as one worker process sees it (thread-safe)."""

    def __init__(
        self,
        frontier: Frontier,
        credentials: Credentials,
        new_fetcher: Callable[[], Fetcher],
        *,
        wait_seconds: float = LOGIN_LOCK_SECONDS,
        log: SliceLog | None = None,
    ) -> None:
        self.frontier = frontier
        self.log = log  # the slice's: a login, a renewal or a failure is a line of the crawl's
        self.credentials = credentials
        self.new_fetcher = new_fetcher
        self.wait_seconds = wait_seconds
        self.turns = HostTurns(frontier)
        self.generation = 0
        self.cookies: list[Cookie] = []
        self._lock = threading.Lock()

    def current(self) -> tuple[int, list[Cookie]]:
        return self.generation, self.cookies

    def start(self) -> None:
        """Take the crawl's session, logging in when there is none yet (LoginFailed). A login
        that failed later in the crawl, with a session before it, is left to the pages."""
        with self._lock:
            self._load(failures=False)
        if self.generation == 0:
            self.renew(0)

    def renew(self, seen: int) -> None:
        """The session of generation `seen` expired: take a newer one, logging in only when no
        other worker or thread has (LoginFailed when that login fails)."""
        with self._lock:
            if self.generation > seen:
                return
            deadline = time.monotonic() + self.wait_seconds
            token = uuid.uuid4().hex
            while True:
                if self._load() > seen:
                    return
                if self.frontier.login_lock(token, self.wait_seconds):
                    try:
                        if self._load() > seen:
                            return
                        self._log_in()
                        return
                    finally:
                        self.frontier.login_unlock(token)
                if time.monotonic() > deadline:
                    raise LoginFailed(f"another worker's login took over {self.wait_seconds:.0f} s")
                time.sleep(0.1)

    def _load(self, *, failures: bool = True) -> int:
        """Read the shared session; raise a recent login failure instead of trying again."""
        found = self.frontier.session()
        recent = int(found.get("failed_until") or 0) > time.time() * 1000
        if failures and found.get("failed") and recent:
            raise LoginFailed(found["failed"])
        generation = int(found.get("gen") or 0)
        if generation != self.generation:
            cookies = json.loads(found.get("cookies") or "[]")
            self.cookies = [Cookie.from_json(cookie) for cookie in cookies]
            self.generation = generation
        return generation

    def _log_in(self) -> None:
        with self.new_fetcher() as fetcher:
            try:
                cookies = log_in(fetcher, self.credentials, self.turns)
            except LoginFailed as exc:
                self.frontier.session_failed(str(exc), for_seconds=LOGIN_FAILURE_SECONDS)
                log.warning("crawl %s: %s", self.frontier.crawl_id, exc)
                self._note(f"the login failed: {exc}", level=CrawlEvent.Level.ERROR)
                raise
        self.cookies = cookies
        self.generation = self.frontier.session_store(json.dumps([c.to_json() for c in cookies]))
        log.info("crawl %s: logged in (session %d)", self.frontier.crawl_id, self.generation)
        what = "logged in" if self.generation == 1 else "the session expired: logged in again"
        where = urlsplit(self.credentials.login_url)._replace(query="", fragment="").geturl()
        self._note(f"{what} at {where[:200]} (session {self.generation})")

    def _note(self, text: str, *, level: str = CrawlEvent.Level.INFO) -> None:
        if self.log is not None:
            host = request_host(self.credentials.login_url)
            self.log.note(CrawlEvent.Kind.LOGIN, text, host=host, level=level)
