"""The proxy inventory and its audit trail. Live pool state (who holds which proxy, per-channel
use counts and bans) is in Redis behind proxies/pool.py; these rows say what a proxy is, how it
did when last validated, and who did what to it."""

from __future__ import annotations

from urllib.parse import quote

from django.conf import settings
from django.db import models
from django.urls import reverse


class Scheme(models.TextChoices):
    HTTP = "http", "HTTP"
    HTTPS = "https", "HTTPS"
    # Through PySocks (requests[socks]): socks5 resolves the target's name here, socks5h has
    # the proxy resolve it.
    SOCKS5 = "socks5", "SOCKS5"
    SOCKS5H = "socks5h", "SOCKS5, names resolved by the proxy"


class ProxyState(models.TextChoices):
    NEW = "new", "New (not yet validated)"
    ACTIVE = "active", "Active (in the pools)"
    DISABLED = "disabled", "Disabled"
    REMOVED = "removed", "Removed"


class Anonymity(models.TextChoices):
    UNKNOWN = "", "Unknown"
    TRANSPARENT = "transparent", "Transparent"
    ANONYMOUS = "anonymous", "Anonymous"
    ELITE = "elite", "Elite"


def pool_key(scheme: str, host: str, port: int) -> str:
    """The id a proxy has in Redis: scheme://host:port, no credentials."""
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}:{port}"


class Proxy(models.Model):
    scheme = models.CharField(max_length=10, choices=Scheme, default=Scheme.HTTP)
    host = models.CharField(max_length=255)
    port = models.PositiveIntegerField()
    username = models.CharField(max_length=255, blank=True)
    # Needed in clear to use the proxy; never rendered (see masked_url).
    password = models.CharField(max_length=255, blank=True)
    source = models.CharField(max_length=500, blank=True, help_text="Where it was imported from.")
    state = models.CharField(
        max_length=10, choices=ProxyState, default=ProxyState.NEW, db_index=True
    )
    score = models.FloatField(default=5.0, db_index=True)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    last_validated_at = models.DateTimeField(null=True, blank=True)
    successes = models.PositiveIntegerField(default=0)
    failures = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    anonymity = models.CharField(max_length=12, choices=Anonymity, blank=True)
    added_at = models.DateTimeField(auto_now_add=True)
    added_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    removed_at = models.DateTimeField(null=True, blank=True)
    removed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    removed_why = models.TextField(blank=True)
    import_job = models.ForeignKey(
        "ProxyJob",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="added",
        help_text="The import that added it.",
    )

    class Meta:
        ordering = ["-score", "id"]
        verbose_name_plural = "proxies"
        constraints = [
            models.UniqueConstraint(fields=["scheme", "host", "port"], name="proxy_unique_address")
        ]

    def __str__(self) -> str:
        return self.masked_url

    def get_absolute_url(self) -> str:
        return reverse("proxy_detail", args=[self.pk])

    @property
    def key(self) -> str:
        return pool_key(self.scheme, self.host, self.port)

    @property
    def address(self) -> tuple[str, str, int]:
        """What makes two proxies the same (as importer.Parsed.address)."""
        return (self.scheme, self.host.lower(), self.port)

    @property
    def url(self) -> str:
        """With credentials, for requests; never shown."""
        if not self.username:
            return self.key
        secret = f"{quote(self.username, safe='')}:{quote(self.password, safe='')}"
        return self.key.replace("://", f"://{secret}@", 1)

    @property
    def masked_url(self) -> str:
        if not self.username:
            return self.key
        return self.key.replace("://", f"://{self.username}:****@", 1)

    def can_enable(self) -> bool:
        return self.state in (ProxyState.DISABLED, ProxyState.REMOVED)

    def can_disable(self) -> bool:
        return self.state in (ProxyState.NEW, ProxyState.ACTIVE)

    def can_remove(self) -> bool:
        return self.state != ProxyState.REMOVED


class ProxyEvent(models.Model):
    """The audit trail and recent history of one proxy: who did what, when and why."""

    class Kind(models.TextChoices):
        IMPORTED = "imported"
        ADMITTED = "admitted"
        VALIDATED = "validated"
        CHECK_FAILED = "check_failed"
        DISABLED = "disabled"
        ENABLED = "enabled"
        REMOVED = "removed"

    proxy = models.ForeignKey(Proxy, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=20, choices=Kind)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    # Who acted when no user did: "validator", "pool", "cli".
    actor = models.CharField(max_length=50, blank=True)
    detail = models.TextField(blank=True)
    at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.kind} {self.proxy}"

    @classmethod
    def record(
        cls, proxies: list[Proxy], kind: str, *, user=None, actor: str = "", detail: str = ""
    ) -> None:
        """One audit row per proxy, written in one statement."""
        cls.objects.bulk_create(
            [cls(proxy=p, kind=kind, user=user, actor=actor, detail=detail) for p in proxies],
            batch_size=500,
        )

    @property
    def who(self) -> str:
        return self.user.get_username() if self.user else (self.actor or "system")


class ProxyJob(models.Model):
    """A proxy import or bulk action that runs in the background, batch by batch (proxies/jobs.py):
    what it is, who asked, how far it got, and what it found. The pages and the API show its
    progress; an import's bad lines and duplicates are its ProxyJobLine rows, the proxies it
    added point to it (Proxy.import_job)."""

    class Kind(models.TextChoices):
        IMPORT = "import", "Import"
        REMOVE = "remove", "Remove"
        DISABLE = "disable", "Disable"
        ENABLE = "enable", "Enable"

    class State(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    kind = models.CharField(max_length=10, choices=Kind)
    state = models.CharField(max_length=10, choices=State, default=State.QUEUED, db_index=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    actor = models.CharField(max_length=50, blank=True)  # "cli", "api"... when no user acted
    source = models.CharField(max_length=500, blank=True, help_text="An import's source.")
    why = models.TextField(blank=True, help_text="A removal's or disabling's reason.")
    # The work itself, emptied when the job ends: the list to import (or the URL to fetch it
    # from, credentials included), or the ids of the proxies to act on.
    text = models.TextField(blank=True)
    url = models.TextField(blank=True)
    ids = models.JSONField(default=list, blank=True)
    # Progress: proxies of the list (or of the selection) dealt with, of how many.
    total = models.PositiveIntegerField(null=True, blank=True)
    done = models.PositiveIntegerField(default=0)
    changed = models.PositiveIntegerField(default=0)  # added, removed, disabled or enabled
    duplicates = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True, help_text="Why the job failed.")
    # Who is running it: a run claims the job; a run that stopped answering is taken over.
    runner = models.CharField(max_length=32, blank=True)
    heartbeat = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} #{self.pk}"

    def get_absolute_url(self) -> str:
        return reverse("proxy_job", args=[self.pk])

    @property
    def ended(self) -> bool:
        return self.state in (self.State.DONE, self.State.FAILED)

    @property
    def unchanged(self) -> int:
        """Of a bulk action's proxies so far: already in that state, or no longer there."""
        return self.done - self.changed

    @property
    def percent(self) -> int:
        if self.state == self.State.DONE:
            return 100
        return int(100 * self.done / self.total) if self.total else 0


class ProxyJobLine(models.Model):
    """One line of an import's list that added nothing: a bad line or a duplicate, with its
    number, its text (password masked) and the reason."""

    class Kind(models.TextChoices):
        ERROR = "error"
        REPEAT = "repeat"  # the same proxy earlier in the same list
        DUPLICATE = "duplicate"  # already in the inventory

    job = models.ForeignKey(ProxyJob, on_delete=models.CASCADE, related_name="lines")
    line = models.PositiveIntegerField()
    kind = models.CharField(max_length=10, choices=Kind)
    text = models.TextField()
    why = models.TextField()

    class Meta:
        ordering = ["line"]
        constraints = [
            models.UniqueConstraint(fields=["job", "line"], name="proxy_job_line_unique")
        ]

    def __str__(self) -> str:
        return f"line {self.line}: {self.why}"
