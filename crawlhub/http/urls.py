"""URLs a crawler can fetch: the checks every door and the fetcher share."""

from __future__ import annotations

from urllib.parse import urlsplit

import idna

MAX_URL_LENGTH = 8000
SCHEMES = ("http", "https")


def url_origin(url: str) -> str:
    """url up to the end of its netloc (where urlsplit ends it), or "" when it has control
    characters (which urlsplit would remove) or no "://"."""
    if not (url.isascii() and url.isprintable()):
        return ""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return ""
    end = len(rest)
    for delimiter in "/?#":
        found = rest.find(delimiter, 0, end)
        if found >= 0:
            end = found
    return url[: len(scheme) + 3 + end]


def ascii_host(host: str) -> str | None:
    """`host` lowercased, without a trailing dot, IDN labels in punycode; None if not a name."""
    host = host.strip().rstrip(".").lower()
    if host.isascii():
        return host or None
    try:
        # UTS #46 mapping is what browsers (and requests) do before IDNA encoding.
        return idna.encode(host, uts46=True).decode("ascii")
    except (idna.IDNAError, UnicodeError):
        try:
            return host.encode("idna").decode("ascii")  # IDNA 2003, for the odd legacy name
        except UnicodeError:
            return None


def validate_url(url: str, field: str = "url") -> str:
    """`url` stripped, if it is an absolute http(s) URL a crawl can fetch; else ValueError."""
    url = url.strip()
    if not is_http_url(url):
        shown = url if len(url) <= 200 else url[:200] + "..."
        if len(url) > MAX_URL_LENGTH:
            raise ValueError(
                f"{field}: {shown!r} is longer than {MAX_URL_LENGTH} characters ({len(url)})"
            )
        raise ValueError(f"{field}: {shown!r} is not an http(s) URL")
    return url


def url_problem(url: str) -> str:
    """Why a crawl cannot fetch `url`, in a few words; "" when it can."""
    if is_http_url(url):
        return ""
    if len(url) > MAX_URL_LENGTH:
        return f"URL longer than {MAX_URL_LENGTH} characters ({len(url)})"
    return "not an http(s) URL"


def is_http_url(url: str) -> bool:
    """True for an absolute http(s) URL with a host, no whitespace, at most 8000 characters."""
    if not url or len(url) > MAX_URL_LENGTH:
        return False
    # Whitespace or control characters inside a URL mean a paste went wrong.
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        return False
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        return False
    if parts.scheme.lower() not in SCHEMES:
        return False
    return bool(parts.hostname) and ascii_host(parts.hostname) is not None
