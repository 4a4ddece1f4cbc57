"""robots.txt: where to find it, what a fetch of it means, and what it allows (via protego)."""

from __future__ import annotations

import math
from urllib.parse import urlsplit

from protego import Protego

DEFAULT_PORTS = {"http": 80, "https": 443}


class RobotsPolicy:
    """The rules of one site's robots.txt. Lookups never raise."""

    def __init__(self, parser: Protego | None, *, allow_all: bool = True) -> None:
        # parser None means a blanket answer: everything allowed, or nothing.
        self._parser = parser
        self._allow_all = allow_all

    @classmethod
    def parse(cls, text: str) -> RobotsPolicy:
        """Rules from robots.txt text; garbage (or a parser failure) allows everything."""
        try:
            return cls(Protego.parse(text))
        except Exception:  # a site's file must never break a crawl
            return cls.allow_everything()

    @classmethod
    def allow_everything(cls) -> RobotsPolicy:
        return cls(None, allow_all=True)

    @classmethod
    def disallow_everything(cls) -> RobotsPolicy:
        return cls(None, allow_all=False)

    def allowed(self, url: str, user_agent: str) -> bool:
        if self._parser is None:
            return self._allow_all
        try:
            return self._parser.can_fetch(url, user_agent)
        except Exception:  # an odd URL against odd rules: do not block the crawl
            return True

    def crawl_delay(self, user_agent: str) -> float | None:
        """Seconds between requests asked for by the site, or None."""
        if self._parser is None:
            return None
        try:
            delay = self._parser.crawl_delay(user_agent)
        except Exception:
            return None
        if delay is None or not math.isfinite(delay) or delay < 0:
            return None
        return float(delay)


def robots_url(url: str) -> str:
    """scheme://host[:port]/robots.txt for the site of `url` (default ports left out)."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = parts.hostname
    if scheme not in DEFAULT_PORTS or not host:
        raise ValueError(f"url: {url[:200]!r} is not an http(s) URL")
    if ":" in host:
        host = f"[{host}]"  # IPv6 literal
    port = parts.port
    if port is not None and port != DEFAULT_PORTS[scheme]:
        host = f"{host}:{port}"
    return f"{scheme}://{host}/robots.txt"


def policy_from_response(status: int | None, text: str) -> RobotsPolicy:
    """The policy a robots.txt fetch implies, following RFC 9309 section 2.3.1.

    - 2xx: the file's rules.
    - 4xx (404, 403, 410, ...): "unavailable", so no restrictions; 401/403 included, as the RFC
      says (unlike the old Google practice of treating them as disallow-all).
    - 5xx, or no response at all (refused, timeout, DNS): "unreachable", so everything is
      disallowed for now. The caller should fetch robots.txt again later rather than keep this
      answer for the whole crawl; RFC 9309 allows assuming allow-all after 30 days of errors.
    - Anything else (1xx, or a 3xx whose redirects could not be followed): treated as
      unavailable (allow all), as the RFC suggests after too many redirects.
    """
    if status is None or status >= 500:
        return RobotsPolicy.disallow_everything()
    if 200 <= status < 300:
        return RobotsPolicy.parse(text)
    return RobotsPolicy.allow_everything()
