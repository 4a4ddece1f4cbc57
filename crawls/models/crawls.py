"""Crawls: their options (the one definition every door takes them from), their states, and
how a crawl logs in to its sites. Live state of a running crawl is in Redis (crawls/engine/
frontier.py); these rows hold what a crawl is and how it ended."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F
from django.urls import reverse

from crawls.models.channels import Channel, UserAgentMode
from crawls.models.fields import LinesField, RulesField

MB = 1024 * 1024
# The largest body a crawl keeps of one response. A worker holds each body once while it is
# fetched, parsed and written (crawlhub/http/bodies.py, links.py), so this bounds its memory;
# kept bodies (keep_bodies) are rows that SQLite (at most 1,000,000,000 bytes a value) and
# PostgreSQL (1 GB a value, hex text twice the size on the way in) take with room to spare.
# Web pages are rarely more than a few MB; 50 MB leaves room for big documents and feeds.
MAX_BODY_BYTES = 50 * MB
# What one slice may hold in bodies at once: threads x max_bytes, each thread fetching one.
MAX_SLICE_BODY_BYTES = 256 * MB


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
