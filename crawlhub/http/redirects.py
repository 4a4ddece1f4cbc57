"""Where a redirect points: the absolute http(s) URL of its Location, or FetchError for one that
is not (the client, crawlhub/http/client.py, follows or records it)."""

from __future__ import annotations

import contextlib
from urllib.parse import urljoin

import requests

from crawlhub.http import links
from crawlhub.http.errors import FetchError

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


def located(response: requests.Response, current: str, location: str) -> str:
    """The target of a redirect that is the answer; FetchError (the connection dropped: its
    body is never read) when the Location is not an http(s) URL."""
    try:
        return redirect_target(current, location)
    except FetchError:
        response.close()
        raise


def redirect_target(current: str, location: str) -> str:
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
