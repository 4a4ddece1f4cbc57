"""How pages relate: the links between the pages of a crawl (where a page was found, what
links to it, the redirect chain it is part of), and what changed between two crawls of the same
site (a schedule's runs, or any two crawls someone compares).

Pages are matched by their URL's fingerprint (Page.fp, the canonical URL the frontier dedups),
indexed with their crawl: a comparison is a few joins on that index, never a loop in Python.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Exists, OuterRef, Q, QuerySet

from crawls.engine.request import fingerprint
from crawls.models import Change, Crawl, Link, Page

GONE = "gone"
KINDS = (Change.NEW, Change.CHANGED, Change.UNCHANGED, GONE)


@dataclass
class InLink:
    url: str
    text: str
    page: Page | None  # the linking page, when it was fetched in this crawl


@dataclass
class InLinks:
    total: int
    shown: list[InLink]


def found_by(page: Page) -> InLink | None:
    """The page it was first found on (its referrer), with the link's text there."""
    if not page.referrer:
        return None
    source = Page.objects.filter(crawl_id=page.crawl_id, url=page.referrer).only("id", "url")
    source = source.first()
    text = ""
    if source is not None and page.fp is not None:
        link = Link.objects.filter(
            crawl_id=page.crawl_id, target_fp=page.fp, source_fp=source.fp
        ).first()
        text = link.text if link else ""
    return InLink(url=page.referrer, text=text, page=source)


def inlinks(page: Page, *, limit: int) -> InLinks:
    """Every page of the crawl that links here: how many, and the first `limit`."""
    if page.fp is None:
        return InLinks(total=0, shown=[])
    links = Link.objects.filter(crawl_id=page.crawl_id, target_fp=page.fp).order_by("id")
    shown = list(links[:limit])
    sources = {
        p.fp: p
        for p in Page.objects.filter(
            crawl_id=page.crawl_id, fp__in=[link.source_fp for link in shown]
        ).only("id", "url", "fp")
    }
    return InLinks(
        total=links.count(),
        shown=[
            InLink(
                url=sources[link.source_fp].url if link.source_fp in sources else "",
                text=link.text,
                page=sources.get(link.source_fp),
            )
            for link in shown
        ],
    )


@dataclass
class Hop:
    """One URL of a redirect chain, as a page's detail shows it."""

    url: str
    page: Page | None = None  # its row in the crawl, when it has one
    here: bool = False  # the page being shown
    note: str = ""  # for where the page points: why it was not followed, or not again


def redirect_chain(page: Page) -> list[Hop]:
    """The redirect chain a page is part of, as far as its row knows it: the URLs that
    redirected the crawl to it, the page, and where it points if it is a redirect (with the
    note of that link: another site, a loop...); [] for a page that is neither."""
    if not page.redirects and not page.redirect_to:
        return []
    hops = [Hop(url) for url in page.redirects if isinstance(url, str)]
    hops.append(Hop(page.url, page=page, here=True))
    if page.redirect_to:
        notes = (link[2] for link in page.links if link[:1] == [page.redirect_to])
        hops.append(Hop(page.redirect_to, note=next(notes, "")))
    by_fp = {fingerprint(hop.url): hop for hop in hops if not hop.here}
    rows = Page.objects.filter(crawl_id=page.crawl_id, fp__in=list(by_fp)).only(
        "id", "crawl_id", "url", "fp", "status"
    )
    found = {row.fp: row for row in rows}
    for hop in hops:
        if not hop.here:
            hop.page = found.get(fingerprint(hop.url))
    return hops


def baseline_page(page: Page, crawl: Crawl) -> Page | None:
    """The same URL in the crawl this one is compared with, if it was fetched there."""
    if crawl.baseline_id is None or page.fp is None:
        return None
    return (
        Page.objects.filter(crawl_id=crawl.baseline_id, fp=page.fp)
        .only("id", "crawl_id", "status", "digest", "fetched_at")
        .first()
    )


def compared(older: Crawl, newer: Crawl, kind: str) -> QuerySet[Page]:
    """The pages of one kind between two crawls: new, changed and unchanged are pages of
    `newer`; gone ones are pages of `older` that `newer` does not have."""
    same_in_older = Page.objects.filter(crawl_id=older.pk, fp=OuterRef("fp"))
    if kind == GONE:
        in_newer = Page.objects.filter(crawl_id=newer.pk, fp=OuterRef("fp"))
        return older.pages.filter(fp__isnull=False).exclude(Exists(in_newer))
    pages = newer.pages.filter(fp__isnull=False)
    if kind == Change.NEW:
        return pages.exclude(Exists(same_in_older))
    unchanged = same_in_older.filter(Q(digest=OuterRef("digest")))
    if kind == Change.UNCHANGED:
        return pages.filter(Q(Exists(unchanged)) | Q(status=304, fp__in=_fps(older)))
    if kind == Change.CHANGED:
        return pages.filter(Exists(same_in_older)).exclude(Exists(unchanged)).exclude(status=304)
    raise ValueError(f"{kind!r} is not one of {', '.join(KINDS)}")


def _fps(crawl: Crawl) -> QuerySet:
    return Page.objects.filter(crawl_id=crawl.pk).values("fp")


def counts(older: Crawl, newer: Crawl) -> dict[str, int]:
    """How many pages of each kind between two crawls."""
    return {str(kind): compared(older, newer, kind).count() for kind in KINDS}


def change_counts(crawl: Crawl) -> dict[str, int] | None:
    """For a crawl with a baseline: its pages by change, and the baseline's pages it lacks."""
    if crawl.baseline_id is None:
        return None
    found = {str(kind): 0 for kind in KINDS}
    by_change = crawl.pages.exclude(change="").values_list("change").annotate(n=Count("id"))
    for change, n in by_change.order_by():
        found[change] = n
    found[GONE] = compared(Crawl(pk=crawl.baseline_id), crawl, GONE).count()
    return found
