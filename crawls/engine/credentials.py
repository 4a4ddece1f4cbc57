"""A crawl's credentials: extra headers, cookies, HTTP basic auth and a login step, as people
give them, checked, and applied to the requests that may carry them.

Where they go: only to the origins they are bound to, exactly (scheme, host and port, as the
HTTP client connects). Those are fixed when the credentials are entered, from the seeds as they
are then (`bound_origins`: each seed's origin, and https on the default port of an http seed's
host on the default port), and saved with them: a seed added later, or a draft's seed edited to
another host, does not get them until the crawl's owner enters them again. Not to the other
hosts allowed_domains lets the crawl visit, and never through a redirect to another host: a
crawl's fetch does not follow redirects (crawls/engine/fetching.py), each hop is a request of its
own and is asked `sends_to` again.

What is secret: every header value, every cookie value, the basic auth password and every
login field value. They are never shown again (`masked()` is what the doors show), never
recorded with a page (Page.request_headers masks them) and never logged.

How each input is read from what people paste (headers, a Cookie header, cookies.txt, login
fields) is in credential_inputs.py; this module holds what they become and where they go.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from parsel import Selector

from crawlhub.http.urls import ascii_host, normalize, validate_url
from crawls.engine.credential_inputs import (
    Cookie,
    CredentialsError,
    check_header_text,
    parse_cookie_header,
    parse_cookies_txt,
    parse_fields,
    parse_headers,
)

MASK = "••••• (set)"
_DEFAULT_PORTS = {"http": 80, "https": 443}


Origin = tuple[str, str, int]  # (scheme, ASCII host, port)


def origin(url: str) -> Origin | None:
    """(scheme, ASCII host, port) of an http(s) URL, read as the client sends it (the host it
    connects to); None for anything else."""
    try:
        parts = urlsplit(normalize(url, userinfo=True))
        scheme = parts.scheme.lower()
        if scheme not in _DEFAULT_PORTS:
            return None
        host = ascii_host(parts.hostname or "")
        return (scheme, host, parts.port or _DEFAULT_PORTS[scheme]) if host else None
    except ValueError:
        return None


@dataclass(frozen=True)
class Credentials:
    """What a crawl sends to the origins they are bound to, and how it logs in (all optional)."""

    origins: frozenset[Origin]
    headers: tuple[tuple[str, str], ...] = ()
    cookies: tuple[Cookie, ...] = ()
    basic_user: str = ""
    basic_password: str = ""
    login_url: str = ""
    login_fields: tuple[tuple[str, str], ...] = ()
    login_check_selector: str = ""
    login_check_url: str = ""
    secret_names: frozenset[str] = field(default=frozenset())

    def __post_init__(self) -> None:
        names = {name.lower() for name, _ in self.headers} | {"authorization", "cookie"}
        object.__setattr__(self, "secret_names", frozenset(names))

    @property
    def logs_in(self) -> bool:
        return bool(self.login_url)

    def sends_to(self, url: str) -> bool:
        """True when `url` is on one of the origins the credentials are bound to, exactly."""
        found = origin(url)
        return found is not None and found in self.origins

    def headers_for(self, url: str, session: list[Cookie] = ()) -> dict[str, str]:
        """The headers a request to `url` carries: none off the crawl's origins."""
        if not self.sends_to(url):
            return {}
        headers = dict(self.headers)
        if self.basic_user or self.basic_password:
            token = f"{self.basic_user}:{self.basic_password}".encode("latin-1")
            headers["Authorization"] = "Basic " + base64.b64encode(token).decode("ascii")
        if cookie := self.cookie_header(url, session):
            headers["Cookie"] = cookie
        return headers

    def cookie_header(self, url: str, session: list[Cookie] = ()) -> str:
        parts = urlsplit(url)
        scheme, host, path = parts.scheme.lower(), ascii_host(parts.hostname or ""), parts.path
        jar: dict[str, str] = {}
        for cookie in (*self.cookies, *session):  # the login's cookies win over given ones
            if cookie.matches(scheme, host, path or "/"):
                jar[cookie.name] = cookie.value
        return "; ".join(f"{name}={value}" for name, value in jar.items())

    def is_login_url(self, url: str) -> bool:
        """`url` is the login page (same origin and path; query and fragment aside)."""
        if not (self.login_url and url):
            return False
        mine, theirs = urlsplit(self.login_url), urlsplit(url)
        return origin(self.login_url) == origin(url) and (mine.path or "/") == (theirs.path or "/")


def seed_origins(seeds: list[str]) -> frozenset[Origin]:
    return frozenset(found for found in map(origin, seeds) if found)


def bound_origins(seeds: list[str]) -> frozenset[Origin]:
    """The origins credentials entered for a crawl of these seeds are bound to: each seed's,
    and https on the default port of an http seed's host on the default port (a site that
    sends its pages to https). Saved with the credentials: the seeds may change, these do not."""
    found = seed_origins(seeds)
    twins = {("https", host, 443) for scheme, host, port in found if (scheme, port) == ("http", 80)}
    return found | twins


def origin_text(found: Origin) -> str:
    """An origin as a URL's start, the port always written: http://127.0.0.1:8001."""
    scheme, host, port = found
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def origins_text(origins) -> str:
    """Origins as the trail and the doors name them, sorted, separated by commas."""
    return ", ".join(sorted(origin_text(found) for found in origins)) or "no origin"


def origins_left_out(credentials: Credentials, seeds: list[str]) -> list[str]:
    """The origins of these seeds that the credentials are not sent to, as origin_text."""
    return sorted(origin_text(found) for found in seed_origins(seeds) - credentials.origins)


def login_problems(credentials: Credentials, *, origins_known: bool = True) -> dict[str, str]:
    """What keeps the login step from running, by input: its URL off the crawl's origins (it
    would get the credentials), fields without a URL, a success check that is no URL or no
    selector. Every problem at once. With origins_known=False (the seeds are wrong themselves)
    the URL is not held against the seeds' hosts."""
    problems: dict[str, str] = {}
    if not credentials.login_url:
        given = [
            name
            for name, value in (
                ("login_fields", credentials.login_fields),
                ("login_check_selector", credentials.login_check_selector),
                ("login_check_url", credentials.login_check_url),
            )
            if value
        ]
        if given:
            problems[given[0]] = "give the login URL too (the login step needs it)"
        return problems
    try:
        validate_url(credentials.login_url, field="login URL")
    except ValueError as exc:
        problems["login_url"] = str(exc)
    else:
        if origins_known and not credentials.sends_to(credentials.login_url):
            hosts = origins_text(credentials.origins)
            problems["login_url"] = (
                f"{credentials.login_url[:200]} is not on the crawl's own hosts ({hosts}): the "
                "login step and the credentials stay on the seeds' hosts"
            )
    if not credentials.login_fields:
        problems["login_fields"] = "give the form's fields, 'name=value' a line"
    if selector := credentials.login_check_selector:
        try:
            Selector(text="<html></html>").css(selector)
        except (SyntaxError, RuntimeError, ValueError) as exc:  # cssselect's SelectorErrors
            problems["login_check_selector"] = f"{selector[:100]!r} is not a CSS selector: {exc}"
    if url := credentials.login_check_url:
        try:
            validate_url(url, field="success URL")
        except ValueError as exc:
            problems["login_check_url"] = str(exc)
    return problems


def masked(credentials: Credentials | None) -> dict:
    """What the doors may show: names and the user name; every secret as MASK."""
    if credentials is None:
        return {}
    shown: dict = {}
    if credentials.headers:
        shown["headers"] = {name: MASK for name, _ in credentials.headers}
    if credentials.cookies:
        shown["cookies"] = {cookie.name: MASK for cookie in credentials.cookies}
    if credentials.basic_user or credentials.basic_password:
        shown["basic_user"] = credentials.basic_user
        shown["basic_password"] = MASK if credentials.basic_password else ""
    if credentials.login_url:
        shown["login_url"] = credentials.login_url
        shown["login_fields"] = {name: MASK for name, _ in credentials.login_fields}
        shown["login_check_selector"] = credentials.login_check_selector
        shown["login_check_url"] = credentials.login_check_url
    if shown:
        shown["origins"] = sorted(origin_text(found) for found in credentials.origins)
    return shown


def from_row(row) -> Credentials:
    """The Credentials a crawls.models.CrawlAuth row holds, bound to the origins saved with
    them (never the crawl's seeds as they are now: those may have changed since)."""
    return Credentials(
        origins=frozenset((scheme, host, int(port)) for scheme, host, port in row.origins),
        headers=tuple((name, value) for name, value in row.headers),
        cookies=tuple(Cookie.from_json(cookie) for cookie in row.cookies),
        basic_user=row.basic_user,
        basic_password=row.basic_password,
        login_url=row.login_url,
        login_fields=tuple((name, value) for name, value in row.login_fields),
        login_check_selector=row.login_check_selector,
        login_check_url=row.login_check_url,
    )


# The inputs a door takes, by the name it gives them (the form's fields, the API's "auth"
# object, the CLI's flags): text, except login_fields and headers which may be lists of lines.
INPUTS: tuple[str, ...] = (
    "headers",
    "cookie",
    "cookies_txt",
    "basic_user",
    "basic_password",
    "login_url",
    "login_fields",
    "login_check_selector",
    "login_check_url",
)


def parse(seeds: list[str] | None, values: dict[str, object]) -> Credentials:
    """Credentials from a door's inputs (INPUTS) for a crawl of these seeds, bound to their
    origins (bound_origins) from now on; CredentialsProblems with every bad input at once,
    each message naming its line where it has lines. Seeds None: the crawl's seeds are wrong
    themselves; every input is checked all the same, except against the seeds' hosts (the
    login URL on them, cookies.txt holding some of theirs), so that the credentials' problems
    come in the same round as the seeds'."""
    problems: dict[str, str] = {}
    origins_known = seeds is not None
    seeds = seeds or []

    def text(name: str) -> str:
        value = values.get(name) or ""
        if isinstance(value, list | tuple):
            value = "\n".join(str(line) for line in value)
        if not isinstance(value, str):
            problems[name] = f"expected text, got {type(value).__name__}"
            return ""
        return value

    parsed: dict = {}
    steps = {
        "headers": lambda: tuple(parse_headers(text("headers"))),
        "cookie": lambda: tuple(parse_cookie_header(text("cookie"))),
        "cookies_txt": lambda: tuple(parse_cookies_txt(text("cookies_txt"))),
        "login_fields": lambda: tuple(parse_fields(text("login_fields"))),
    }
    for name, step in steps.items():
        try:
            parsed[name] = step()
        except CredentialsError as exc:
            problems[exc.field] = exc.message
    user, password = text("basic_user"), text("basic_password")
    for name, value in (("basic_user", user), ("basic_password", password)):
        if problem := check_header_text(value, "it"):
            problems[name] = problem
    if ":" in user:
        problems["basic_user"] = "a basic auth user name cannot hold a colon"
    if password and not user:
        problems["basic_user"] = "give the user name with the password"
    if any(name.lower() == "authorization" for name, _ in parsed.get("headers", ())) and user:
        problems["headers"] = "an Authorization header and basic auth both set it: give one"
    credentials = Credentials(
        origins=bound_origins(seeds),
        headers=parsed.get("headers", ()),
        cookies=parsed.get("cookie", ()) + _on_origins(parsed.get("cookies_txt", ()), seeds),
        basic_user=user.strip(),
        basic_password=password,
        login_url=text("login_url").strip(),
        login_fields=parsed.get("login_fields", ()),
        login_check_selector=text("login_check_selector").strip(),
        login_check_url=text("login_check_url").strip(),
    )
    on_hosts = any(c.domain for c in credentials.cookies)
    if parsed.get("cookies_txt") and origins_known and not on_hosts:
        hosts = ", ".join(sorted({h for _, h, _ in credentials.origins}))
        problems["cookies_txt"] = f"no cookie in cookies.txt is for the seeds' hosts ({hosts})"
    for name, message in login_problems(credentials, origins_known=origins_known).items():
        problems.setdefault(name, message)
    if problems:
        raise CredentialsProblems(problems)
    return credentials


class CredentialsProblems(ValueError):
    """Every input that could not be used: field -> message."""

    def __init__(self, problems: dict[str, str]) -> None:
        super().__init__("; ".join(f"{k}: {v}" for k, v in problems.items()))
        self.problems = problems


def _on_origins(cookies: tuple[Cookie, ...], seeds: list[str]) -> tuple[Cookie, ...]:
    """The cookies of a cookies.txt that a crawl of these seeds could send (a browser's file
    holds every site's cookies: the others are dropped, never stored)."""
    hosts = {host for _, host, _ in seed_origins(seeds)}
    return tuple(
        cookie
        for cookie in cookies
        if cookie.domain in hosts
        or (cookie.subdomains and any(h.endswith("." + cookie.domain) for h in hosts))
    )


# The kinds of saved credentials a door may remove one by one: kind -> (words for it, the
# inputs that give it, the crawls.models.CrawlAuth fields that hold it).
KINDS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "headers": ("extra headers", ("headers",), ("headers",)),
    "cookies": ("cookies", ("cookie", "cookies_txt"), ("cookies",)),
    "basic_auth": (
        "basic auth",
        ("basic_user", "basic_password"),
        ("basic_user", "basic_password"),
    ),
    "login": (
        "login step",
        ("login_url", "login_fields", "login_check_selector", "login_check_url"),
        ("login_url", "login_fields", "login_check_selector", "login_check_url"),
    ),
}


def kinds_set(credentials: Credentials | None) -> list[str]:
    """The KINDS these credentials hold, in KINDS' order."""
    if credentials is None:
        return []
    held = {
        "headers": credentials.headers,
        "cookies": credentials.cookies,
        "basic_auth": credentials.basic_user or credentials.basic_password,
        "login": credentials.login_url,
    }
    return [kind for kind in KINDS if held[kind]]


def removal_conflicts(auth: dict[str, object], remove: list[str] | tuple[str, ...]) -> dict:
    """Kinds both given anew and asked to be removed, kind -> message: one or the other."""
    return {
        kind: f"either give new {KINDS[kind][0]} or remove the saved ones, not both"
        for kind in remove
        if kind in KINDS and any(auth.get(name) for name in KINDS[kind][1])
    }


def is_empty(credentials: Credentials) -> bool:
    return not (
        credentials.headers
        or credentials.cookies
        or credentials.basic_user
        or credentials.basic_password
        or credentials.login_url
    )


def to_row_values(credentials: Credentials) -> dict:
    """The crawls.models.CrawlAuth fields holding these credentials."""
    return {
        "headers": [list(pair) for pair in credentials.headers],
        "cookies": [cookie.to_json() for cookie in credentials.cookies],
        "basic_user": credentials.basic_user,
        "basic_password": credentials.basic_password,
        "login_url": credentials.login_url,
        "login_fields": [list(pair) for pair in credentials.login_fields],
        "login_check_selector": credentials.login_check_selector,
        "login_check_url": credentials.login_check_url,
        "origins": sorted([list(found) for found in credentials.origins]),
    }
