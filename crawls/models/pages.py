"""What a crawl fetched: its pages, and the links between them."""

from __future__ import annotations

from django.db import connections, models, transaction
from django.db.models import F
from django.db.models.functions import Substr
from django.urls import reverse

from crawls import page_search
from crawls.models.crawls import Crawl

# Pages sort by this much of their URL (an index of whole URLs would outgrow PostgreSQL's
# limit on an index entry).
URL_SORT_CHARS = 200


class PageSource(models.TextChoices):
    """How a page came into its crawl."""

    SEED = "seed", "Seed"
    LINK = "link", "Link"
    SITEMAP = "sitemap", "Listed in a sitemap"
    SITEMAP_FILE = "sitemap_file", "A sitemap"
    REDIRECT = "redirect", "Redirect target"


class Change(models.TextChoices):
    """A page against the crawl's baseline (Crawl.baseline); "gone" pages exist only there."""

    NEW = "new", "New"
    CHANGED = "changed", "Changed"
    UNCHANGED = "unchanged", "Unchanged"


def _by_crawl(*columns: str) -> models.Index:
    """An index for one crawl's pages filtered or sorted by `columns`, ties broken by id (the
    pages browser pages through them by key: crawls/pages.py)."""
    return models.Index(
        fields=["crawl", *columns, "id"], name="page_" + "_".join(c.strip("-") for c in columns)
    )


COVERED = ("bytes", "elapsed_ms", "fetched_at")


def _covering(column: str, other: str) -> models.Index:
    """_by_crawl(column) with `other` and the numeric sorts (COVERED) after id: the same order,
    and what sorting a filter's matches by any of them reads, on the index alone."""
    return models.Index(
        fields=["crawl", column, "id", other, *COVERED], name=f"page_{column}_cover"
    )


class PageQuerySet(models.QuerySet):
    def bulk_create(self, objs, *args, **kwargs):
        """As Django's; on SQLite the pages made also go into the text index, which has no
        insert trigger (crawls/page_search.py; the engine writes through
        crawls.engine.rows.PAGE_ROWS, which feeds it the same way)."""
        if connections[self.db].vendor != "sqlite":
            return super().bulk_create(objs, *args, **kwargs)
        with transaction.atomic(using=self.db), connections[self.db].cursor() as cur:
            after = page_search.last_page_id(cur)
            made = super().bulk_create(objs, *args, **kwargs)
            page_search.index_pages_after(cur, after)
        return made


class Page(models.Model):
    """One fetched URL of a crawl: what was sent and what came back (or the error), what was
    pulled out of it, where it links to, and how it compares with the crawl's baseline."""

    crawl = models.ForeignKey(Crawl, on_delete=models.CASCADE, related_name="pages", db_index=False)
    url = models.TextField()
    final_url = models.TextField(blank=True)
    status = models.PositiveSmallIntegerField(null=True, blank=True)
    content_type = models.CharField(max_length=200, blank=True)
    bytes = models.PositiveIntegerField(default=0)
    elapsed_ms = models.PositiveIntegerField(default=0)
    depth = models.PositiveIntegerField(default=0)
    referrer = models.TextField(blank=True)
    fetched_at = models.DateTimeField()
    title = models.CharField(max_length=500, blank=True)
    error = models.TextField(blank=True)
    # A crawl fetches each hop of a redirect chain as a page of its own (once per URL, like
    # links): `redirects` are the URLs that redirected the crawl here, the first one first;
    # `redirect_to` is where this page, a redirect, points (followed when in scope: its note
    # in `links` says otherwise). Rows from before that held the hops after `url` instead.
    redirects = models.JSONField(default=list, blank=True)
    redirect_to = models.TextField(blank=True)
    # The body was cut off at the crawl's max_bytes: kept that far, its links not followed.
    truncated = models.BooleanField(default=False)
    body = models.BinaryField(null=True, blank=True)
    # SHA-1 of the URL: unique per crawl without indexing unbounded text.
    url_hash = models.CharField(max_length=40)
    # The URL's fingerprint (its canonical form, as the frontier dedups it): the same page in
    # another crawl, and the links that point here (Link.target_fp). Null on older rows.
    fp = models.BigIntegerField(null=True, blank=True)
    source = models.CharField(max_length=12, choices=PageSource, default=PageSource.LINK)
    # What was sent: the request's headers (secrets masked) and the proxy (masked), if any.
    request_headers = models.JSONField(default=dict, blank=True)
    proxy = models.CharField(max_length=300, blank=True)
    # The final response's headers (lowercase names; bounded, see crawls/engine/rows.py).
    headers = models.JSONField(default=dict, blank=True)
    # For a crawl that keeps bodies (its WARC's request and response records): the request head
    # as sent, then the response head as received, each ending with its blank line, secrets
    # masked (crawlhub/http/wire.py). Null otherwise, and on rows from before it: nullable so
    # that adding it rewrites no table.
    heads = models.TextField(null=True, blank=True)  # noqa: DJ001
    # SHA-256 of the body as received (decoded), kept or not: what "changed" compares.
    digest = models.CharField(max_length=64, blank=True)
    # Extraction rules' values by field name, and the error of each rule that failed here.
    extracted = models.JSONField(default=dict, blank=True)
    extract_errors = models.JSONField(default=dict, blank=True)
    structured_data = models.JSONField(null=True, blank=True)
    # Out-links in document order, at most rows.MAX_OUTLINKS: [url, link text, why not
    # followed ("" when it went to the frontier)]; links_total counts them all.
    links = models.JSONField(default=list, blank=True)
    links_total = models.PositiveIntegerField(default=0)
    change = models.CharField(max_length=10, choices=Change, blank=True)
    # Fetches of this URL, and what went wrong in the ones before the last (retries).
    attempts = models.PositiveSmallIntegerField(default=1)
    history = models.JSONField(default=list, blank=True)

    objects = PageQuerySet.as_manager()

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["crawl", "url_hash"], name="page_unique_per_crawl")
        ]
        indexes = [
            models.Index(fields=["crawl", "id"], name="page_crawl_id"),
            models.Index(fields=["crawl", "fp"], name="page_fp"),
            # Status and depth, the filters that pick few pages far along another sort, cover
            # the numeric sorts: their matches are then sorted on the index alone (no table
            # reads). Ordered by (crawl, status or depth, id) as the other indexes are.
            _covering("status", "depth"),
            _covering("depth", "status"),
            _by_crawl("bytes"),
            _by_crawl("elapsed_ms"),
            _by_crawl("fetched_at"),
            _by_crawl("content_type"),
            _by_crawl("title"),
            _by_crawl("change"),
            # URLs are unbounded text; their first URL_SORT_CHARS sort them (crawls/pages.py).
            models.Index(F("crawl"), Substr("url", 1, URL_SORT_CHARS), F("id"), name="page_url"),
        ]

    def __str__(self) -> str:
        return self.url

    def get_absolute_url(self) -> str:
        return reverse("page_detail", args=[self.crawl_id, self.pk])


class Link(models.Model):
    """One page linking to another URL of its crawl (by fingerprint), with the link's text:
    a page's in-links, counted. One row per distinct target of a page, for the links the crawl
    could follow (in scope); what else a page links to is in Page.links."""

    crawl = models.ForeignKey(Crawl, on_delete=models.CASCADE, related_name="+", db_index=False)
    source_fp = models.BigIntegerField()
    target_fp = models.BigIntegerField()
    text = models.CharField(max_length=200, blank=True)

    class Meta:
        indexes = [models.Index(fields=["crawl", "target_fp"], name="link_target")]

    def __str__(self) -> str:
        return f"{self.source_fp} -> {self.target_fp}"
