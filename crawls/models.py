"""Channels, crawls and their results. Live state of a running crawl is in Redis (frontier.py);
these rows hold what a crawl is, who did what to it, and what it fetched."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import connections, models, transaction
from django.db.models import F
from django.db.models.functions import Substr
from django.urls import reverse

from crawls import page_search

MB = 1024 * 1024
# The largest body a crawl keeps of one response. A worker holds each body once while it is
# fetched, parsed and written (crawlhub/http/bodies.py, links.py), so this bounds its memory;
# kept bodies (keep_bodies) are rows that SQLite (at most 1,000,000,000 bytes a value) and
# PostgreSQL (1 GB a value, hex text twice the size on the way in) take with room to spare.
# Web pages are rarely more than a few MB; 50 MB leaves room for big documents and feeds.
MAX_BODY_BYTES = 50 * MB
# What one slice may hold in bodies at once: threads x max_bytes, each thread fetching one.
MAX_SLICE_BODY_BYTES = 256 * MB
# Pages sort by this much of their URL (an index of whole URLs would outgrow PostgreSQL's
# limit on an index entry).
URL_SORT_CHARS = 200


class UserAgentMode(models.TextChoices):
    FIXED = "fixed", "Fixed string"
    RANDOM = "random", "Random per request"


class ProxyUse(models.TextChoices):
    OFF = "off", "No proxy"
    POOL = "pool", "From the proxy pool"


class ProxyStrategy(models.TextChoices):
    LEAST_USED = "least_used", "Least used (per request)"
    ROUND_ROBIN = "round_robin", "Round robin (per request)"
    GREEDY = "greedy", "Greedy (keep a fast proxy)"


class LinesField(models.JSONField):
    """A list of strings, one value per line where a person types it (a textarea, a repeated
    flag, a JSON list). The doors look for this class to parse it; to the database and to
    migrations it is a JSONField (see deconstruct)."""

    def deconstruct(self) -> tuple:
        # Nothing about it is stored differently: migrations keep seeing a JSONField, so that
        # marking a field as lines never rebuilds a table.
        name, _path, args, kwargs = super().deconstruct()
        return name, "django.db.models.JSONField", args, kwargs


class RulesField(models.JSONField):
    """Extraction rules: a JSON list of objects (crawls/engine/extraction.py says what each
    holds). The doors look for this class: a JSON text in forms and on the command line, a
    list in the API. A JSONField to the database and to migrations."""

    def deconstruct(self) -> tuple:
        name, _path, args, kwargs = super().deconstruct()
        return name, "django.db.models.JSONField", args, kwargs


class Channel(models.Model):
    """A group of crawls sharing politeness defaults and a proxy pool."""

    slug = models.SlugField(max_length=50, unique=True)
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    proxy_use = models.CharField(max_length=10, choices=ProxyUse, default=ProxyUse.OFF)
    proxy_strategy = models.CharField(
        max_length=20, choices=ProxyStrategy, default=ProxyStrategy.LEAST_USED
    )
    host_delay = models.FloatField(
        default=0.0,
        validators=[MinValueValidator(0.0), MaxValueValidator(3600.0)],
        help_text="Default seconds between two requests to one host.",
    )
    host_concurrency = models.PositiveIntegerField(
        default=8,
        validators=[MinValueValidator(1), MaxValueValidator(256)],
        help_text="Default requests in flight to one host.",
    )
    user_agent_mode = models.CharField(
        max_length=10, choices=UserAgentMode, default=UserAgentMode.RANDOM
    )
    extract_rules = RulesField(
        default=list,
        blank=True,
        help_text="Default extraction rules of this channel's crawls (a crawl's own replace them).",
    )
    render_javascript = models.BooleanField(
        default=False,
        help_text="Crawls of this channel render pages in headless Chromium unless they say no.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @classmethod
    def default(cls) -> Channel:
        channel, _ = cls.objects.get_or_create(slug="default", defaults={"name": "Default"})
        return channel


class CrawlState(models.TextChoices):
    DRAFT = "draft", "Draft"
    RUNNING = "running", "Running"
    PAUSING = "pausing", "Pausing"
    PAUSED = "paused", "Paused"
    FINISHED = "finished", "Finished"
    CANCELLED = "cancelled", "Cancelled"
    FAILED = "failed", "Failed"


class EndReason(models.TextChoices):
    """Why a crawl that is over ended (Crawl.end_reason; lifecycle.end_line says it in words)."""

    FINISHED = "finished", "Finished"  # every URL it scheduled was done
    MAX_PAGES = "max_pages", "Max pages reached"  # done, with links left that the cap refused
    CANCELLED = "cancelled", "Cancelled"
    FAILED = "failed", "Failed"


# A crawl in one of these has ended for good: nothing changes it any more.
OVER_STATES = (CrawlState.FINISHED, CrawlState.CANCELLED, CrawlState.FAILED)

# Counters kept in Redis while a crawl runs and copied here when it ends.
COUNTERS = (
    "requests",
    "responses",
    "repeats",
    "errors",
    "retries",
    "failed",
    "bytes",
    "status_2xx",
    "status_3xx",
    "status_4xx",
    "status_5xx",
)


class CrawlOptions(models.Model):
    """How a crawl runs: every field here is an option a person sets when creating a crawl.

    The one definition of the options: the crawl form, the CLI's `crawl create`, the API's
    serializers, the admin and schedule runs all take them from here (CRAWL_OPTIONS), so a new
    option is a new field here, its migration, and its place on the new-crawl page (the page's
    sections are laid out by hand). Help texts say the units; every door shows them.
    """

    allowed_domains = LinesField(
        default=list,
        blank=True,
        help_text="Hosts the crawl may visit, subdomains included; empty: the seeds' hosts.",
    )
    include_patterns = LinesField(
        default=list,
        blank=True,
        help_text="Regular expressions; when given, a URL must match one.",
    )
    exclude_patterns = LinesField(
        default=list, blank=True, help_text="Regular expressions; a URL matching one is skipped."
    )
    max_depth = models.PositiveIntegerField(
        default=3,
        validators=[MaxValueValidator(4000)],
        help_text="Links followed away from a seed; 0: the seeds only.",
    )
    max_pages = models.PositiveIntegerField(
        default=1000,
        validators=[MinValueValidator(1), MaxValueValidator(100_000_000)],
        help_text="URLs the crawl schedules at most, seeds included.",
    )
    priority = models.IntegerField(
        default=0,
        validators=[MinValueValidator(-100), MaxValueValidator(100)],
        help_text="From -100 to 100; above 0 its slices go to the front of the workers' queue, "
        "ahead of other crawls' waiting slices.",
    )
    threads = models.PositiveIntegerField(
        default=8,
        validators=[MinValueValidator(1), MaxValueValidator(128)],
        help_text="Concurrent fetches in one slice.",
    )
    slices = models.PositiveIntegerField(
        default=2,
        validators=[MinValueValidator(1), MaxValueValidator(64)],
        help_text="Slices (RQ jobs) in flight at once.",
    )
    host_delay = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.0), MaxValueValidator(3600.0)],
        help_text="Seconds between two requests to one host; empty: the channel's.",
    )
    host_concurrency = models.PositiveIntegerField(
        default=0,
        validators=[MaxValueValidator(128)],
        help_text="Requests one host is asked at once, over all workers; 0: no cap. With a "
        "host delay, a host is asked one request at a time.",
    )
    obey_robots = models.BooleanField(
        default=True,
        help_text="Skip the URLs a site's robots.txt disallows, and honour its Crawl-delay.",
    )
    user_agent_mode = models.CharField(
        max_length=10,
        choices=UserAgentMode,
        blank=True,
        help_text="One fixed User-Agent, or a random browser's per request; empty: the channel's.",
    )
    user_agent = models.CharField(
        max_length=500,
        blank=True,
        help_text="Sent in fixed mode and matched in robots.txt; empty: crawlhub's own.",
    )
    timeout = models.FloatField(
        default=15.0,
        validators=[MinValueValidator(0.1), MaxValueValidator(600.0)],
        help_text="Seconds a connect or a read may wait; a whole fetch gets three times this.",
    )
    max_bytes = models.PositiveIntegerField(
        default=5 * MB,
        validators=[
            MinValueValidator(1024),
            MaxValueValidator(MAX_BODY_BYTES, f"At most {MAX_BODY_BYTES} bytes (50 MB)."),
        ],
        help_text="Bytes; a larger body is cut off there and not parsed. At most 50 MB, and "
        "threads x max bytes at most 256 MB.",
    )
    max_retries = models.PositiveIntegerField(
        default=2,
        validators=[MaxValueValidator(20)],
        help_text="Retries of a request that timed out, could not connect or got a 5xx or 429, "
        "before it goes to the failure queue.",
    )
    keep_bodies = models.BooleanField(
        default=False,
        help_text="Keep each response's body in the database (to read it on the page's detail "
        "and for WARC export).",
    )
    extract_rules = RulesField(
        default=list,
        blank=True,
        help_text="Fields to pull out of every page: each a CSS selector, XPath, regular "
        "expression or JMESPath (JSON); empty: the channel's rules.",
    )
    keep_structured_data = models.BooleanField(
        default=False,
        help_text="Keep the structured data pages declare: JSON-LD, microdata and OpenGraph.",
    )
    follow_sitemaps = models.BooleanField(
        default=False,
        help_text="Also crawl the URLs the seeds' sites list in their sitemaps (the Sitemap: "
        "lines of robots.txt, and /sitemap.xml), within the crawl's scope.",
    )
    render_javascript = models.BooleanField(
        null=True,
        blank=True,
        verbose_name="render JavaScript",
        help_text="Load each HTML page in headless Chromium and take its links and fields from "
        "the DOM its scripts built; empty: the channel's.",
    )
    render_wait_selector = models.CharField(
        max_length=500,
        blank=True,
        verbose_name="rendered when this CSS selector is there",
        help_text="Rendering waits for it (up to the timeout) rather than for the network to "
        "settle.",
    )

    class Meta:
        abstract = True

    def clean(self) -> None:
        """Each thread of a slice holds up to max_bytes of body: their sum is bounded too."""
        super().clean()
        threads, max_bytes = self.threads, self.max_bytes
        if not (isinstance(threads, int) and isinstance(max_bytes, int)):
            return  # the field's own error says what is wrong
        if 0 < max_bytes <= MAX_BODY_BYTES and threads * max_bytes > MAX_SLICE_BODY_BYTES:
            raise ValidationError(
                {
                    "max_bytes": f"Threads x max bytes is at most {MAX_SLICE_BODY_BYTES // MB} MB, "
                    f"the memory one slice may hold in bodies: {threads} x {max_bytes} bytes is "
                    f"{threads * max_bytes / MB:.0f} MB. Lower one of them.",
                }
            )


# What a caller may set on a new crawl besides name, channel and seeds, in the model's order.
CRAWL_OPTIONS: tuple[str, ...] = tuple(field.name for field in CrawlOptions._meta.fields)


class Crawl(CrawlOptions):
    name = models.CharField(max_length=200)
    channel = models.ForeignKey(Channel, on_delete=models.PROTECT, related_name="crawls")
    seeds = LinesField(help_text="Start URLs.")
    state = models.CharField(
        max_length=10, choices=CrawlState, default=CrawlState.DRAFT, db_index=True
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="crawls"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    # Why it ended, set where it ends (crawls.engine.lifecycle): the reason and the one line
    # that says it (by whom, how much was left) on its page, in the list, the API and webhooks.
    end_reason = models.CharField(
        max_length=10,
        choices=EndReason,
        blank=True,
        help_text="Why it ended: finished (every URL it scheduled was done), max_pages (done, "
        "with links the cap refused), cancelled, failed; empty while it has not ended.",
    )
    end_line = models.CharField(
        max_length=500,
        blank=True,
        help_text="Why it ended, in one line: who cancelled it and how much was left, why it "
        "failed, how many links max pages refused.",
    )
    # Final counters (copied from Redis when the crawl ends).
    stats = models.JSONField(default=dict, blank=True)
    # Lines of its log removed to keep it bounded (crawls.engine.crawl_log.trim).
    log_removed = models.PositiveIntegerField(default=0)
    # Set on the crawls a schedule started: the run history of that schedule.
    schedule = models.ForeignKey(
        "CrawlSchedule", on_delete=models.SET_NULL, null=True, blank=True, related_name="runs"
    )
    # The earlier crawl this one is compared with (a schedule's previous run): each page is
    # new, changed or unchanged against it, and its pages' validators make requests conditional.
    baseline = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        # The crawl list's default order, read from the index a page at a time rather than
        # sorting every crawl for each page.
        indexes = [models.Index(F("created_at").desc(), F("id").desc(), name="crawl_newest")]

    def __str__(self) -> str:
        return f"#{self.pk} {self.name}"

    def get_absolute_url(self) -> str:
        return reverse("crawl_detail", args=[self.pk])

    def effective_host_delay(self) -> float:
        return self.host_delay if self.host_delay is not None else self.channel.host_delay

    def effective_user_agent_mode(self) -> str:
        return self.user_agent_mode or self.channel.user_agent_mode

    def effective_extract_rules(self) -> list:
        return self.extract_rules or self.channel.extract_rules

    def effective_render_javascript(self) -> bool:
        if self.render_javascript is not None:
            return self.render_javascript
        return self.channel.render_javascript

    def is_active(self) -> bool:
        return self.state in (CrawlState.RUNNING, CrawlState.PAUSING)

    def is_owned_by(self, user) -> bool:
        """`user` created the crawl (staff who may see it do not own it)."""
        return user is not None and self.created_by_id is not None and user.pk == self.created_by_id

    def can_start(self) -> bool:
        return self.state == CrawlState.DRAFT

    def can_pause(self) -> bool:
        return self.state == CrawlState.RUNNING

    def can_resume(self) -> bool:
        return self.state in (CrawlState.PAUSING, CrawlState.PAUSED)

    def can_cancel(self) -> bool:
        return self.state in (CrawlState.RUNNING, CrawlState.PAUSING, CrawlState.PAUSED)

    def can_add_seeds(self) -> bool:
        return self.state in (CrawlState.DRAFT, CrawlState.RUNNING, CrawlState.PAUSED)

    def is_over(self) -> bool:
        return self.state in OVER_STATES


class CrawlAuth(models.Model):
    """How a crawl logs in to its sites: extra headers, cookies, HTTP basic auth and a login
    step (crawls/engine/credentials.py says where they go and what is secret).

    Kept apart from the options (CrawlOptions), so that nothing that copies, serializes or
    exports a crawl's options carries them: the doors write it through crawls.services and
    show only credentials.masked(). A channel's defaults never hold it: credentials belong to
    the crawl of one site, not to every crawl of a channel.
    """

    crawl = models.OneToOneField(Crawl, on_delete=models.CASCADE, related_name="auth")
    headers = models.JSONField(default=list, blank=True)  # [[name, value], ...]
    cookies = models.JSONField(default=list, blank=True)  # Cookie.to_json() each
    basic_user = models.CharField(max_length=200, blank=True)
    basic_password = models.TextField(blank=True)
    login_url = models.TextField(blank=True)
    login_fields = models.JSONField(default=list, blank=True)  # [[name, value], ...]
    login_check_selector = models.CharField(max_length=500, blank=True)
    login_check_url = models.TextField(blank=True)
    # Where they go: [[scheme, host, port], ...], the seeds' origins when they were entered
    # (credentials.bound_origins). Seeds added or edited later do not move them.
    origins = models.JSONField(default=list, blank=True)

    def __str__(self) -> str:
        return f"credentials of crawl #{self.crawl_id}"


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


class SpilledRequest(models.Model):
    """A queued request of a crawl whose queue outgrew its window in Redis
    (CRAWLHUB_FRONTIER_WINDOW): the lowest-ranked part of the queue waits here, one row per
    request, and goes back to Redis in rank order as the queue drains
    (crawls/engine/overflow.py). `score` is the queue's score (priority, depth, the host's
    turn: lua/_lib.lua's score()), `packed` the request as the queue holds it
    (Request.pack). Written and removed in batches, never per page."""

    crawl = models.ForeignKey(Crawl, on_delete=models.CASCADE, related_name="+", db_index=False)
    fp = models.BigIntegerField()
    score = models.BigIntegerField()
    packed = models.TextField()

    class Meta:
        constraints = [
            # A spill written again after a crash adds nothing: a request is one row.
            models.UniqueConstraint(fields=["crawl", "fp"], name="spilled_unique_per_crawl")
        ]
        indexes = [models.Index(fields=["crawl", "score"], name="spilled_next")]

    def __str__(self) -> str:
        return f"{self.crawl_id}:{self.fp}"


class FailedRequest(models.Model):
    """A request that used up its retries: the crawl's failure queue."""

    crawl = models.ForeignKey(Crawl, on_delete=models.CASCADE, related_name="failures")
    url = models.TextField()
    depth = models.PositiveIntegerField(default=0)
    referrer = models.TextField(blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    last_status = models.PositiveSmallIntegerField(null=True, blank=True)
    failed_at = models.DateTimeField()
    url_hash = models.CharField(max_length=40)

    class Meta:
        ordering = ["-failed_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["crawl", "url_hash"], name="failure_unique_per_crawl")
        ]

    def __str__(self) -> str:
        return self.url


class CrawlEvent(models.Model):
    """What happened to a crawl, and when: its log. Two kinds of line in one timeline:
    - the audit trail: who did what to it (created, paused, a host held...), with the user,
      written by the services; never removed while the crawl exists;
    - what its workers did (a slice, a host slowed or parked, a login, errors, retries given
      up), with no user, written by the engine (crawls/engine/crawl_log.py) per slice and per
      event, never per page; kept bounded (crawl_log.trim)."""

    class Kind(models.TextChoices):
        CREATED = "created"
        STARTED = "started"
        PAUSED = "paused"
        RESUMED = "resumed"
        CANCELLED = "cancelled"
        FINISHED = "finished"
        FAILED = "failed"
        RETRIED = "retried"
        SEEDS_ADDED = "seeds_added"
        SITEMAP = "sitemap"  # a sitemap could not be read whole: detail says why
        HOST_HELD = "host_held"  # detail: the host and until when
        HOST_RELEASED = "host_released"  # by a user, or a hold or parking that ended
        HOST_DROPPED = "host_dropped"  # detail: the host and how many requests
        EDITED = "edited"  # a draft's settings: detail names each field changed
        CHANGED = "changed", "Settings changed"  # while it ran: detail says "field: old -> new"
        # Entered again by the owner, or bound by an upgrade: detail names kinds and origins.
        CREDENTIALS = "credentials", "Credentials"
        # What the workers did (crawls/engine/crawl_log.py):
        SLICE = "slice", "Slice"  # a slice started fetching, or ended: pages, why
        SLOWED = "slowed", "Host slowed"  # a 429/503 push-back, or back to its pace
        PARKED = "parked", "Host parked"  # none of its requests got an answer for a while
        LOGIN = "login", "Login"  # logged in, session renewed, or the login failed
        ERROR = "error", "Errors"  # requests without an answer (or retried): how many, why
        GAVE_UP = "gave_up", "Retries given up"  # to the failure queue: how many, why
        STOPPED = "stopped", "Slices stopped"  # still running after a pause or cancel

    class Level(models.TextChoices):
        INFO = "info"
        WARNING = "warning"
        ERROR = "error"

    crawl = models.ForeignKey(Crawl, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=20, choices=Kind)
    level = models.CharField(max_length=7, choices=Level, default=Level.INFO)
    host = models.CharField(max_length=255, blank=True)  # the host it is about, if one
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    detail = models.TextField(blank=True)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-at", "-id"]
        # The log's screens (newest first, by level) and its trimming (per level).
        indexes = [models.Index(fields=["crawl", "level", "id"], name="crawlevent_level")]

    def __str__(self) -> str:
        return f"{self.kind} {self.at:%Y-%m-%d %H:%M:%S}"


class CrawlDeletion(models.Model):
    """The audit trail of deleted crawls: a crawl's own trail goes with it."""

    crawl_id = models.PositiveIntegerField(db_index=True)
    name = models.CharField(max_length=200)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    state = models.CharField(max_length=10, choices=CrawlState)  # when it was deleted
    pages = models.PositiveIntegerField(default=0)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"crawl #{self.crawl_id} {self.name} deleted {self.at:%Y-%m-%d %H:%M:%S}"


class CrawlSchedule(models.Model):
    """A crawl re-run on a cron expression: each run is a new crawl copied from the template."""

    template = models.ForeignKey(Crawl, on_delete=models.CASCADE, related_name="schedules")
    cron = models.CharField(
        max_length=100, help_text="Five fields: minute hour day-of-month month day-of-week."
    )
    enabled = models.BooleanField(default=True)
    next_run_at = models.DateTimeField(null=True, blank=True, db_index=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["next_run_at", "id"]

    def __str__(self) -> str:
        return f"{self.template.name} ({self.cron})"

    def get_absolute_url(self) -> str:
        return reverse("schedule_detail", args=[self.pk])


class WebhookEvent(models.TextChoices):
    FINISHED = "finished", "Crawl finished"
    FAILED = "failed", "Crawl failed"
    CANCELLED = "cancelled", "Crawl cancelled"
    ALERT = "alert", "Alert fired or resolved"


class DeliveryEvent(models.TextChoices):
    """What a delivery tells: a crawl's end or an alert (WebhookEvent), or a test sent from the
    page."""

    FINISHED = "finished", "Crawl finished"
    FAILED = "failed", "Crawl failed"
    CANCELLED = "cancelled", "Crawl cancelled"
    ALERT = "alert", "Alert fired or resolved"
    TEST = "test", "Test delivery"


def _all_events() -> list[str]:
    return list(WebhookEvent.values)


class Webhook(models.Model):
    """A URL that gets a signed POST when a crawl of its channel (or the one crawl) ends."""

    channel = models.ForeignKey(
        Channel, on_delete=models.CASCADE, null=True, blank=True, related_name="webhooks"
    )
    crawl = models.ForeignKey(
        Crawl, on_delete=models.CASCADE, null=True, blank=True, related_name="webhooks"
    )
    url = models.URLField(max_length=2000)
    # Kept in clear because every delivery is signed with it; shown once, at creation.
    secret = models.CharField(max_length=100)
    events = models.JSONField(default=_all_events)
    active = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(channel__isnull=False, crawl__isnull=True)
                | models.Q(channel__isnull=True, crawl__isnull=False),
                name="webhook_channel_xor_crawl",
            )
        ]

    def __str__(self) -> str:
        return self.url

    def get_absolute_url(self) -> str:
        return reverse("webhook_detail", args=[self.pk])

    @property
    def target(self) -> str:
        return f"channel {self.channel}" if self.channel_id else f"crawl {self.crawl}"


class Delivery(models.Model):
    """Something sent with retries (crawls/deliveries.py): its attempts, and how it ended."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed (gave up)"

    status = models.CharField(max_length=10, choices=Status, default=Status.PENDING, db_index=True)
    attempts = models.PositiveIntegerField(default=0)
    # Each attempt: {"at", "error", "ms"}, and what the kind adds (a webhook's "status_code").
    log = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        abstract = True


class WebhookDelivery(Delivery):
    """One event sent to one webhook: every attempt, and how it ended."""

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    crawl = models.ForeignKey(
        Crawl, on_delete=models.SET_NULL, null=True, blank=True, related_name="deliveries"
    )
    event = models.CharField(max_length=20, choices=DeliveryEvent)
    payload = models.JSONField()
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    response_snippet = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "webhook deliveries"

    def __str__(self) -> str:
        return f"{self.event} -> {self.webhook}"


class AlertKind(models.TextChoices):
    """What an alert rule watches (crawls/alert_checks.py evaluates them)."""

    ERROR_RATE = "error_rate", "Error rate over N% in M minutes"
    NO_PROGRESS = "no_progress", "No progress for M minutes"
    HOST_PARKED = "host_parked", "A host parked"
    ENDED_BADLY = "ended_badly", "Ended abnormally (cancelled, failed or stalled)"


class AlertRule(models.Model):
    """A condition watched on one crawl, or on every crawl of a channel, and who is told."""

    channel = models.ForeignKey(
        Channel, on_delete=models.CASCADE, null=True, blank=True, related_name="alert_rules"
    )
    crawl = models.ForeignKey(
        Crawl, on_delete=models.CASCADE, null=True, blank=True, related_name="alert_rules"
    )
    kind = models.CharField(max_length=20, choices=AlertKind)
    # N of "error rate over N%", 1..100; M of "in M minutes" and "no progress for M minutes".
    percent = models.PositiveSmallIntegerField(null=True, blank=True)
    minutes = models.PositiveIntegerField(null=True, blank=True)
    # Addresses told by e-mail; the webhooks of the crawl (or channel) that want "alert" are
    # told too.
    emails = models.JSONField(default=list, blank=True)
    active = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(channel__isnull=False, crawl__isnull=True)
                | models.Q(channel__isnull=True, crawl__isnull=False),
                name="alert_rule_channel_xor_crawl",
            )
        ]

    def __str__(self) -> str:
        return f"{self.condition} ({self.target})"

    @property
    def target(self) -> str:
        return f"channel {self.channel}" if self.channel_id else f"crawl {self.crawl}"

    @property
    def condition(self) -> str:
        """The condition in words, with its figures."""
        if self.kind == AlertKind.ERROR_RATE:
            return f"Error rate over {self.percent}% in {self.minutes} min"
        if self.kind == AlertKind.NO_PROGRESS:
            return f"No progress for {self.minutes} min"
        return self.get_kind_display()


class Alert(models.Model):
    """One episode of a rule's condition on one crawl: fired once when it began, resolved once
    when it cleared. `subject` tells episodes of one rule apart: the host parked, the way a
    crawl ended ("cancelled", "failed", "stalled"), or "" for the crawl as a whole."""

    rule = models.ForeignKey(
        AlertRule, on_delete=models.SET_NULL, null=True, blank=True, related_name="alerts"
    )
    crawl = models.ForeignKey(Crawl, on_delete=models.CASCADE, related_name="alerts")
    kind = models.CharField(max_length=20, choices=AlertKind)
    subject = models.CharField(max_length=255, blank=True)
    # What happened, which crawl, the figures and when, in one line each way.
    line = models.CharField(max_length=500)
    resolved_line = models.CharField(max_length=500, blank=True)
    figures = models.JSONField(default=dict, blank=True)
    fired_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    # Each attempt at an e-mail for it: {"at", "notice", "to", "error"}; AlertMail holds the
    # e-mail itself, with its retries.
    mail_log = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["-fired_at", "-id"]
        constraints = [
            # One open episode per rule, crawl and subject: the evaluator fires it only once.
            models.UniqueConstraint(
                fields=["rule", "crawl", "subject"],
                condition=models.Q(resolved_at__isnull=True),
                name="alert_one_open_episode",
            )
        ]

    def __str__(self) -> str:
        return self.line

    @property
    def is_open(self) -> bool:
        return self.resolved_at is None


class AlertMail(Delivery):
    """One notice of an alert (fired, resolved) e-mailed to its rule's addresses, tried again as
    a webhook delivery is (crawls/deliveries.py)."""

    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, related_name="mails")
    notice = models.CharField(max_length=10)  # "fired" | "resolved"

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.notice} e-mail of alert {self.alert_id}"
