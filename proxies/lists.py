"""Getting a proxy list's text: fetched from a URL with the HTTP kit's client (its guard, its
deadline, a size cap), or decoded from an upload. Parsing it is importer.py; storing it, jobs.py.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from crawlhub.http import Fetcher, refusal
from crawlhub.http.urls import url_problem
from proxies import importer

MAX_LIST_BYTES = 5 * 1024 * 1024
FETCH_TIMEOUT = 15  # seconds per connect or read
FETCH_DEADLINE = 60  # seconds for the whole download, redirects included
MAX_REDIRECTS = 5


class ImportFailed(Exception):
    """The list itself could not be read (URL unreachable, not text, too large)."""


def check_url(url: str) -> None:
    """What can be told about a list's URL without fetching it: its scheme, its form, and the
    private-network guard's verdict on its host. Raises ImportFailed; the doors call it before
    they queue an import, so such a URL is refused at once."""
    shown = shown_url(url)
    if not url.startswith(("http://", "https://")):
        raise ImportFailed("the list URL must start with http:// or https://")
    if problem := url_problem(url, userinfo=True):  # before the fetcher, which repeats the URL
        raise ImportFailed(f"could not fetch {shown}: {problem}")
    if blocked := refusal(url):
        raise ImportFailed(f"refused to fetch {shown}: {blocked.removeprefix('blocked: ')}")


def fetch_list(*, url: str) -> str:
    """Download a plain-text proxy list with the HTTP kit's client: through its private-network
    guard when CRAWLHUB_BLOCK_PRIVATE_NETWORKS is on (every redirect hop is checked), within a
    whole-fetch deadline, and never more than MAX_LIST_BYTES."""
    shown = shown_url(url)
    check_url(url)
    with Fetcher(
        timeout=FETCH_TIMEOUT,
        total_timeout=FETCH_DEADLINE,
        max_bytes=MAX_LIST_BYTES,
        user_agent_mode="fixed",
        pool_size=1,
        max_redirects=MAX_REDIRECTS,
    ) as client:
        result = client.get(url)
    if result.error_kind == "blocked":
        hop = f" (redirected to {shown_url(result.redirects[-1])})" if result.redirects else ""
        reason = result.error.removeprefix("blocked: ")
        raise ImportFailed(f"refused to fetch {shown}{hop}: {reason}")
    if result.error:
        raise ImportFailed(f"could not fetch {shown}: {result.error}")
    if not 200 <= (result.status or 0) < 300:
        raise ImportFailed(f"could not fetch {shown}: HTTP {result.status}")
    kind = (result.content_type or "text/plain").split(";")[0].strip().lower()
    if not (kind.startswith("text/") or kind in ("application/octet-stream", "")):
        raise ImportFailed(f"expected a plain-text list at {shown}, got {kind}")
    if result.truncated:
        raise ImportFailed(
            f"the list at {shown} is larger than {MAX_LIST_BYTES // 1024 // 1024} MB"
        )
    return decode_list(result.body)


def shown_url(url: str) -> str:
    """A list's URL as it may be shown or stored as a source: any password in it masked."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return importer.mask(url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return urlunsplit(parts._replace(netloc=f"{userinfo.split(':', 1)[0]}:****@{hostport}"))


def decode_list(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ImportFailed("the list is not UTF-8 text") from None
