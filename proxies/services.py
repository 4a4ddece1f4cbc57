"""Everything that changes the proxy inventory. Views, admin actions, the CLI and the jobs only
parse input and call these: one code path per action, whichever door it came in by."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from django.db import IntegrityError, transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from crawlhub.http import Fetcher
from crawlhub.http.urls import url_problem
from proxies import importer, pool, validation
from proxies.health import announce
from proxies.models import Anonymity, Proxy, ProxyEvent, ProxyState, pool_key

log = logging.getLogger(__name__)

# Never-measured and never-validated proxies go last on every database (SQLite and PostgreSQL
# disagree on where NULL sorts).
SORTS = {
    "score": F("score").desc(), "latency": F("latency_ms").asc(nulls_last=True),
    "validated": F("last_validated_at").desc(nulls_last=True), "failures": F("failures").desc(),
    "added": F("added_at").desc(),
}  # fmt: skip
SCORE_RANGES = {
    "0-5": (0, 5), "5-6": (5, 6), "6-10": (6, 10), "10+": (10, None),
}  # fmt: skip

MAX_LIST_BYTES = 5 * 1024 * 1024
FETCH_TIMEOUT = 15  # seconds per connect or read
FETCH_DEADLINE = 60  # seconds for the whole download, redirects included
MAX_REDIRECTS = 5


class ImportFailed(Exception):
    """The list itself could not be read (URL unreachable, not text, too large)."""


@dataclass
class Duplicate:
    line: int
    text: str
    why: str


@dataclass
class ImportReport:
    source: str
    added: list[Proxy] = field(default_factory=list)
    duplicates: list[Duplicate] = field(default_factory=list)
    errors: list[importer.LineError] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "source": self.source,
            "added": [p.masked_url for p in self.added],
            "duplicates": [d.__dict__ for d in self.duplicates],
            "errors": [e.__dict__ for e in self.errors],
        }


def import_proxies(*, text: str, source: str, user=None, actor: str = "") -> ImportReport:
    """Add every new proxy of a list; report bad lines and duplicates. New proxies are
    validated (by a job, after commit) before they enter the pools."""
    if len(text.encode()) > MAX_LIST_BYTES:  # a paste or an API body, as a file or a download
        raise ImportFailed(f"the list is larger than {MAX_LIST_BYTES // 1024 // 1024} MB")
    parsed = importer.parse(text)
    report = ImportReport(source=source, errors=parsed.errors)
    for line, text_, first in parsed.repeats:
        report.duplicates.append(Duplicate(line, text_, f"repeats line {first}"))
    existing = _existing(parsed.proxies)
    with transaction.atomic():
        for item in parsed.proxies:
            known = existing.get(item.address)
            if known is not None:
                why = f"already in the inventory ({known.get_state_display().lower()})"
                report.duplicates.append(Duplicate(item.line, known.masked_url, why))
                continue
            try:
                with transaction.atomic():
                    proxy = Proxy.objects.create(
                        scheme=item.scheme, host=item.host, port=item.port,
                        username=item.username, password=item.password, source=source[:500],
                        added_by=user,
                    )  # fmt: skip
            except IntegrityError:  # imported by someone else a moment ago
                report.duplicates.append(
                    Duplicate(item.line, pool_key(*item.address), "already in the inventory")
                )
                continue
            ProxyEvent.record(
                [proxy], ProxyEvent.Kind.IMPORTED, user=user, actor=actor, detail=source
            )
            report.added.append(proxy)
        if report.added:
            validation.request_validation(proxies=report.added)
            announce()
    return report


def _existing(items: list[importer.Parsed]) -> dict[tuple[str, str, int], Proxy]:
    hosts = {item.host for item in items}
    found = {}
    for chunk in _chunks(sorted(hosts), 500):
        for proxy in Proxy.objects.filter(host__in=chunk):
            found[(proxy.scheme, proxy.host.lower(), proxy.port)] = proxy
    return found


def fetch_list(*, url: str) -> str:
    """Download a plain-text proxy list with the HTTP kit's client: through its private-network
    guard when CRAWLHUB_BLOCK_PRIVATE_NETWORKS is on (every redirect hop is checked), within a
    whole-fetch deadline, and never more than MAX_LIST_BYTES."""
    shown = shown_url(url)
    if not url.startswith(("http://", "https://")):
        raise ImportFailed("the list URL must start with http:// or https://")
    if problem := url_problem(url):  # before the fetcher, whose error would repeat the URL
        raise ImportFailed(f"could not fetch {shown}: {problem}")
    with Fetcher(
        timeout=FETCH_TIMEOUT, total_timeout=FETCH_DEADLINE, max_bytes=MAX_LIST_BYTES,
        user_agent_mode="fixed", pool_size=1, max_redirects=MAX_REDIRECTS,
    ) as client:  # fmt: skip
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


def import_from_url(*, url: str, user=None, actor: str = "") -> ImportReport:
    text = fetch_list(url=url)
    return import_proxies(text=text, source=shown_url(url), user=user, actor=actor)


def remove_proxies(
    *, proxies: Iterable[Proxy], why: str, user=None, actor: str = ""
) -> list[Proxy]:
    """Out of every Redis pool at once, state removed, and an audit row saying who and why."""
    why = why.strip() or "no reason given"
    with transaction.atomic():
        done = [proxy for proxy in _lock(proxies) if proxy.can_remove()]
        pool.remove_many(proxies=[proxy.key for proxy in done])
        now = timezone.now()
        for proxy in done:
            proxy.state, proxy.removed_at = ProxyState.REMOVED, now
            proxy.removed_by, proxy.removed_why = user, why
        Proxy.objects.bulk_update(
            done, ["state", "removed_at", "removed_by", "removed_why"], batch_size=500
        )
        ProxyEvent.record(done, ProxyEvent.Kind.REMOVED, user=user, actor=actor, detail=why)
        announce()
    return done


def disable_proxies(
    *, proxies: Iterable[Proxy], why: str = "", user=None, actor: str = ""
) -> list[Proxy]:
    """Out of the pools but kept in the inventory, to be enabled again later."""
    with transaction.atomic():
        done = [proxy for proxy in _lock(proxies) if proxy.can_disable()]
        pool.remove_many(proxies=[proxy.key for proxy in done])
        for proxy in done:
            proxy.state = ProxyState.DISABLED
        Proxy.objects.bulk_update(done, ["state"], batch_size=500)
        ProxyEvent.record(done, ProxyEvent.Kind.DISABLED, user=user, actor=actor, detail=why)
        announce()
    return done


def enable_proxies(*, proxies: Iterable[Proxy], user=None, actor: str = "") -> list[Proxy]:
    """Back to new: validated again, then it enters the pools. A removed proxy starts over."""
    done = []
    with transaction.atomic():
        for proxy in _lock(proxies):
            if not proxy.can_enable():
                continue
            if proxy.state == ProxyState.REMOVED:
                proxy.score = pool.INITIAL_SCORE
            proxy.state = ProxyState.NEW
            proxy.removed_at = proxy.removed_by = None
            proxy.removed_why = ""
            proxy.save(update_fields=["state", "score", "removed_at", "removed_by", "removed_why"])
            pool.allow(proxy=proxy.key)
            ProxyEvent.record([proxy], ProxyEvent.Kind.ENABLED, user=user, actor=actor)
            done.append(proxy)
        if done:
            validation.request_validation(proxies=done)
            announce()
    return done


def resolve(*, addresses: Iterable[str]) -> tuple[list[Proxy], list[str]]:
    """Proxies named host:port or scheme://host:port (credentials ignored); and the unknown."""
    found, unknown = [], []
    for address in addresses:
        parsed = importer.parse_line(address)
        if isinstance(parsed, importer.LineError):
            unknown.append(address)
            continue
        query = Proxy.objects.filter(host=parsed.host, port=parsed.port)
        if "://" in address:
            query = query.filter(scheme=parsed.scheme)
        matches = list(query)
        found += matches
        if not matches:
            unknown.append(address)
    return found, unknown


def _lock(proxies: Iterable[Proxy]) -> list[Proxy]:
    ids = [p.pk for p in proxies]
    return list(Proxy.objects.select_for_update().filter(pk__in=ids).order_by("pk"))


def _chunks(items: list, size: int) -> Iterable[list]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def filter_proxies(params, query: QuerySet | None = None) -> QuerySet:
    """The list filters shared by the page (and its CLI/JSON twin): state, channel, score range,
    anonymity, source, search; plus the sort."""
    query = Proxy.objects.all() if query is None else query
    if state := params.get("state"):
        query = query.filter(state=state)
    elif not params.get("all"):
        query = query.exclude(state=ProxyState.REMOVED)
    if channel := params.get("channel"):
        sets = pool.channel_members(channel=channel)
        keys = sets["free"] | sets["leased"]
        query = query.filter(pk__in=[p.pk for p in query if p.key in keys])
    if (bounds := SCORE_RANGES.get(params.get("score", ""))) is not None:
        low, high = bounds
        query = query.filter(score__gte=low)
        if high is not None:
            query = query.filter(score__lt=high)
    anonymity = params.get("anonymity") or ""
    if anonymity == "unknown":
        query = query.filter(anonymity="")
    elif anonymity in Anonymity.values and anonymity:
        query = query.filter(anonymity=anonymity)
    if source := params.get("source"):
        query = query.filter(source__icontains=source)
    if q := params.get("q"):
        query = query.filter(Q(host__icontains=q) | Q(source__icontains=q))
    return query.order_by(SORTS.get(params.get("sort", ""), SORTS["score"]), "pk")
