"""A sitemap request in a slice (Request.reads_sitemap): what the fetched file lists.

A crawl that follows sitemaps starts with one request per seed site for its /sitemap.xml (the
site's root, VIA_SITEMAP_ROOT), which also reads the Sitemap: lines of the site's robots.txt.
An index lists more sitemap files, a urlset the pages: both go to the frontier as requests,
the files to be read in turn (VIA_SITEMAP), the pages to be fetched (VIA_LISTED). So sitemaps
get the frontier's dedup, leases, pause and cancel, and count in max_pages; a crawl is not done
while one is still being read. A sitemap file that is not there (404, 410) is no page of the
site: it is taken back out of the crawl's requests, counted in `sitemaps_missing` and told in
the crawl's log (a guessed /sitemap.xml as a note, one the site listed as a warning).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from crawlhub.http.client import FetchResult
from crawls.engine import sitemaps
from crawls.engine.request import VIA_SITEMAP_ROOT, Request

DEFAULT_PORTS = {"http": 80, "https": 443}
# The statuses that say a sitemap file is not there.
MISSING = (404, 410)
# What one sitemap fetch may download (gzip files are decompressed by sitemaps.parse, bounded).
FETCH_BYTES = sitemaps.MAX_SITEMAP_BYTES


@dataclass
class SitemapRead:
    pages: list[str] = field(default_factory=list)  # what a urlset (or a text file) lists
    sitemaps: list[str] = field(default_factory=list)  # what an index, or robots.txt, lists
    problems: list[str] = field(default_factory=list)  # sentences about the file, for people
    # The file is not there (MISSING): not a page of the site, whoever guessed or listed it;
    # what the crawl's log says of it instead (Recorder, crawls/engine/recording.py).
    absent: str = ""


def sitemap_roots(seeds: list[str]) -> list[str]:
    """<origin>/sitemap.xml of each site the seeds are on, once each, in the seeds' order;
    the origin as a browser writes it (lowercase host, no default port, no credentials)."""
    roots = []
    for seed in seeds:
        try:
            parts = urlsplit(seed.strip())
            port = parts.port
        except ValueError:
            continue
        scheme, host = parts.scheme.lower(), parts.hostname
        if scheme not in DEFAULT_PORTS or not host:
            continue
        host = f"[{host}]" if ":" in host else host
        if port is not None and port != DEFAULT_PORTS[scheme]:
            host = f"{host}:{port}"
        roots.append(f"{scheme}://{host}/sitemap.xml")
    return list(dict.fromkeys(roots))


def read(
    request: Request,
    fetch: FetchResult,
    *,
    robots_listed: list[str],
    site_allowed: Callable[[str], bool] = lambda url: True,
) -> SitemapRead:
    """What the sitemap `fetch` got lists, with `robots_listed` (the Sitemap: lines of the
    site's robots.txt, for a site's root request) among its sitemaps. The sitemaps an index
    lists are read only on the crawl's sites (`site_allowed`); a robots.txt may name a sitemap
    anywhere (the protocol's cross-submission)."""
    found = SitemapRead(sitemaps=sitemaps.usable_sitemaps(robots_listed))
    root = request.via == VIA_SITEMAP_ROOT
    if fetch.error or fetch.status is None:
        found.problems.append(f"{request.url}: {fetch.error or 'no response'}")
        return found
    if fetch.status in MISSING:
        # A site without /sitemap.xml is common; a sitemap the site listed that is missing is not.
        found.absent = (
            f"no sitemap at {request.url} ({fetch.status})"
            if root
            else f"{request.url}: listed in robots.txt or a sitemap index, but not there "
            f"(HTTP {fetch.status})"
        )
        return found
    if not 200 <= fetch.status < 300:
        if not (root and 400 <= fetch.status < 500):
            found.problems.append(f"{request.url}: HTTP {fetch.status}")
        return found
    if fetch.truncated:
        found.problems.append(
            f"{request.url}: cut at the download size limit ({len(fetch.body):,} bytes)"
        )
    parsed = sitemaps.parse(fetch.body, fetch.final_url)
    found.problems += parsed.problems
    if parsed.kind == "index":
        listed = [url for url in parsed.locs if site_allowed(url)]
        if len(listed) < len(parsed.locs):
            found.problems.append(
                f"{request.url}: {len(parsed.locs) - len(listed):,} sitemaps on other sites "
                "than the crawl's: not read"
            )
        found.sitemaps += listed
    else:
        found.pages = parsed.locs
    return found
