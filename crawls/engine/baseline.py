"""The run a crawl is compared with (Crawl.baseline, a schedule's previous run): what it knew
of each URL, so that a page can be sent as a conditional request and said to be new, changed
or unchanged, and a 304 Not Modified can stand for the page as it was.

Looked up by URL fingerprint (Page.fp, indexed with the crawl), a claimed batch at a time: one
query per claim, never one per page.
"""

from __future__ import annotations

from dataclasses import dataclass

from crawls.engine.results import MAX_OUTLINKS
from crawls.models import Change, Page

# What a 304 copies from the page as it was in the baseline (besides its links).
CARRIED = ("title", "content_type", "digest", "extracted", "extract_errors", "structured_data")


@dataclass(frozen=True)
class Known:
    """A URL as the baseline run found it."""

    digest: str
    etag: str = ""
    last_modified: str = ""

    def conditional_headers(self) -> dict[str, str]:
        """If-None-Match / If-Modified-Since from the response the baseline got."""
        headers = {}
        if self.etag:
            headers["If-None-Match"] = self.etag
        if self.last_modified:
            headers["If-Modified-Since"] = self.last_modified
        return headers


class Baseline:
    def __init__(self, crawl_id: int | None) -> None:
        self.crawl_id = crawl_id

    def __bool__(self) -> bool:
        return self.crawl_id is not None

    def lookup(self, fps: list[int]) -> dict[int, Known]:
        """What the baseline knew of these URLs; a URL it did not fetch is absent. Validators
        only of complete 200 pages whose links it kept whole: a 304 stands for those alone."""
        if not self or not fps:
            return {}
        rows = Page.objects.filter(crawl_id=self.crawl_id, fp__in=fps).values_list(
            "fp", "digest", "status", "truncated", "links_total", "headers"
        )
        known = {}
        for fp, digest, status, truncated, links_total, headers in rows:
            if status == 200 and not truncated and links_total <= MAX_OUTLINKS:
                headers = headers if isinstance(headers, dict) else {}
                known[fp] = Known(
                    digest=digest,
                    etag=_header(headers, "etag"),
                    last_modified=_header(headers, "last-modified"),
                )
            else:
                known[fp] = Known(digest=digest)
        return known

    def pages(self, fps: list[int]) -> dict[int, dict]:
        """The baseline's pages of these URLs, as a 304 carries them over: CARRIED and links."""
        if not self or not fps:
            return {}
        rows = Page.objects.filter(crawl_id=self.crawl_id, fp__in=fps).values(
            "fp", "links", *CARRIED
        )
        return {row.pop("fp"): row for row in rows}


def change_of(known: Known | None, *, digest: str, not_modified: bool, baseline: bool) -> str:
    """A page against the baseline: "" without one, else new, changed or unchanged."""
    if not baseline:
        return ""
    if known is None:
        return Change.NEW
    if not_modified or (digest and digest == known.digest):
        return Change.UNCHANGED
    return Change.CHANGED


def _header(headers: dict, name: str) -> str:
    value = headers.get(name, "")
    # A header that could not be sent back (a line break in it) is not used.
    if not isinstance(value, str) or "\r" in value or "\n" in value:
        return ""
    return value
