"""Which URLs a crawl may visit: allowed domains plus include/exclude regexes, and URL checks."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from urllib.parse import urlsplit

from crawlhub.http.urls import SCHEMES, ascii_host, url_origin, validate_url
from crawls.engine.patterns import Pattern, PatternError, compile_pattern, match_any

MAX_PATTERNS = 100  # per field


class ScopeError(ValueError):
    """A scope setting that cannot be used; the message names the field, line and value."""

    def __init__(self, field: str, message: str, *, problems: list[str] | None = None) -> None:
        problems = problems or [message]
        super().__init__(f"{field}: " + "; ".join(problems))
        self.field = field
        self.message = message  # without the field's name: for a form that shows it by the field
        self.problems = problems  # every bad line's, when there are several


def compile_patterns(patterns: list[str], field: str) -> list[Pattern]:
    """One pattern per non-blank line (patterns.py: Python's syntax, RE2's linear time); line
    numbers in errors count from 1, blank lines included."""
    return _compile(patterns, field)[0]


def _compile(patterns: list[str], field: str) -> tuple[list[Pattern], Pattern | None]:
    """The field's patterns, and the one pattern Scope searches for them all."""
    lines = [(line, text.strip()) for line, text in enumerate(patterns, start=1)]
    # A blank line in a textarea is not a pattern: "" would match every URL.
    lines = [(line, text) for line, text in lines if text]
    if len(lines) > MAX_PATTERNS:
        raise ScopeError(field, f"{len(lines):,} patterns; at most {MAX_PATTERNS}")
    compiled, problems = [], []
    for line, text in lines:
        try:
            compiled.append(compile_pattern(text))
        except PatternError as exc:  # every bad line is said at once, not the first only
            problems.append(f"line {line}: {exc}")
    if problems:
        raise ScopeError(field, problems[0], problems=problems)
    try:
        return compiled, match_any(compiled)
    except PatternError as exc:  # too complex together
        raise ScopeError(field, str(exc)) from None


def _url_host(url: str) -> str | None:
    # Scheme and host come from what precedes the path: checked once per "scheme://netloc".
    origin = url_origin(url)
    return _origin_url_host(origin) if origin else _split_url_host(url)


@lru_cache(maxsize=4096)
def _origin_url_host(origin: str) -> str | None:
    return _split_url_host(origin)


_NO_URL = re.compile("(?!)").fullmatch
# What follows a URL's origin in the URLs url_origin reads that origin from: printable ASCII.
_PRINTABLE_FROM = re.compile("[ -~]*").fullmatch


@lru_cache(maxsize=4096)
def _on_origin(origin: str) -> Callable[[str], re.Match | None]:
    """The match of the URLs that start with origin + "/" and are printable ASCII: those
    url_origin reads `origin` from. One call in C per link, where startswith, isascii and
    isprintable were three and their Python around them. Compiled once per origin (sre's
    compiler is Python, ~9,000 bytecode instructions): for the crawl's own origins."""
    return re.compile(re.escape(origin + "/") + "[ -~]*").fullmatch


def _on_other_origin(origin: str) -> Callable[[str], re.Match | bool | None]:
    """_on_origin's test for an origin outside the crawl's domains, with nothing compiled: a
    broad crawl's pages (directories, blog rolls) link to new ones all the time."""
    prefix, start = origin + "/", len(origin) + 1
    return lambda url: url.startswith(prefix) and _PRINTABLE_FROM(url, start)


def _split_url_host(url: str) -> str | None:
    try:
        parts = urlsplit(url)
        if parts.scheme.lower() not in SCHEMES:
            return None
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
        return ascii_host(parts.hostname or "")
    except ValueError:  # e.g. "http://[::1" or port 99999
        return None


def _domain(value: str, line: int) -> str:
    """An allowed_domains line as a bare ASCII host; accepts "*.x.com", ".x.com" and URLs."""
    raw = value.strip()
    text = raw if "://" in raw else f"http://{raw}"
    try:
        host = urlsplit(text).hostname or ""
    except ValueError:
        host = ""
    domain = ascii_host(host.lstrip("*."))
    if not domain:
        raise ScopeError("allowed_domains", f"line {line}: {raw!r} is not a domain name")
    return domain


def _seeds(seeds: list[str]) -> list[str]:
    urls = []
    for line, seed in enumerate(seeds, start=1):
        if seed.strip():
            try:
                urls.append(validate_url(seed, f"line {line}"))
            except ValueError as exc:
                raise ScopeError("seeds", str(exc)) from None
    return urls


class Scope:
    """The URLs a crawl may follow. Construction validates everything; `allows` never raises."""

    def __init__(
        self,
        *,
        seeds: list[str],
        allowed_domains: list[str],
        include: list[str],
        exclude: list[str],
    ) -> None:
        seed_urls = _seeds(seeds)
        domains = [_domain(d, n) for n, d in enumerate(allowed_domains, 1) if d.strip()]
        if not domains:
            domains = [host for host in map(_url_host, seed_urls) if host]
        self.domains: tuple[str, ...] = tuple(dict.fromkeys(domains))
        # Suffixes with the dot, so "example.com" allows "www.example.com" but not "badexample.com".
        self._suffixes = tuple("." + d for d in self.domains)
        # Each field's patterns searched as one: a URL is read once, whatever their number.
        self.include = _compile(include, "include_patterns")[1]
        self.exclude = _compile(exclude, "exclude_patterns")[1]
        # why_not's last origin: (the match of URLs on it, what its host gave); none at first.
        self._last_origin = (_NO_URL, "")

    def _host_note(self, host: str | None) -> str:
        """why_not's reading of a URL's host: "" for an allowed one."""
        if not host:
            return "not an http(s) URL"
        if not self._allows_ascii_host(host):
            return f"other site ({host})"
        return ""

    def _allows_ascii_host(self, host: str) -> bool:
        """True for an allowed domain or one of its subdomains (host: lowercase, punycode)."""
        return host in self.domains or host.endswith(self._suffixes)

    def allows(self, url: str) -> bool:
        """True for an http(s) URL on an allowed host, matching the include/exclude rules."""
        host = _url_host(url)
        if not host or not self._allows_ascii_host(host):
            return False
        if self.include and not self.include.search(url):
            return False
        return not (self.exclude and self.exclude.search(url))

    def allows_site(self, url: str) -> bool:
        """True for an http(s) URL on an allowed host, whatever the include/exclude rules (a
        sitemap file, which is not a page of the crawl)."""
        host = _url_host(url)
        return bool(host) and self._allows_ascii_host(host)

    def why_not(self, url: str) -> str:
        """Why `allows` refuses url, in a few words ("" when it allows it): for people reading
        a page's out-links.

        Asked for every link of every page, whose links are mostly on one origin: what the
        last origin's host gave is kept with the match of its URLs (_on_origin), and a URL it
        matches (url_origin reads that origin from it) has the same host, not read again. One
        attribute, set at once: the fetch threads share the scope."""
        on_origin, host_note = self._last_origin
        if not on_origin(url):
            origin = url_origin(url)
            host_note = self._host_note(
                _origin_url_host(origin) if origin else _split_url_host(url)
            )
            if origin:
                on_origin = _on_other_origin(origin) if host_note else _on_origin(origin)
                self._last_origin = (on_origin, host_note)
        if host_note:
            return host_note
        if self.include and not self.include.search(url):
            return "matches no include pattern"
        if self.exclude and self.exclude.search(url):
            return "matches an exclude pattern"
        return ""
