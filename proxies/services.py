"""Everything that changes the proxy inventory. Views, admin actions, the CLI and the jobs only
parse input and call these: one code path per action, whichever door it came in by."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit, urlunsplit

import django_rq
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count, F
from django.utils import timezone

from crawls import netguard
from crawls.fetcher import Fetcher
from crawls.scope import url_problem
from proxies import importer, pool
from proxies.models import Proxy, ProxyEvent, ProxyState, pool_key

log = logging.getLogger(__name__)

MAX_LIST_BYTES = 5 * 1024 * 1024
FETCH_TIMEOUT = 15  # seconds per connect or read
FETCH_DEADLINE = 60  # seconds for the whole download, redirects included
MAX_REDIRECTS = 5
# The Proxies page's websocket group, and how often at most a change is pushed to it.
HEALTH_GROUP = "proxies"
PUBLISH_EVERY_MS = 250


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
            _event(proxy, ProxyEvent.Kind.IMPORTED, user=user, actor=actor, detail=source)
            report.added.append(proxy)
        if report.added:
            request_validation(proxies=report.added)
            _announce()
    return report


def _existing(items: list[importer.Parsed]) -> dict[tuple[str, str, int], Proxy]:
    hosts = {item.host for item in items}
    found = {}
    for chunk in _chunks(sorted(hosts), 500):
        for proxy in Proxy.objects.filter(host__in=chunk):
            found[(proxy.scheme, proxy.host.lower(), proxy.port)] = proxy
    return found


def fetch_list(*, url: str) -> str:
    """Download a plain-text proxy list: with the crawls' fetcher, so through the private-network
    guard when CRAWLHUB_BLOCK_PRIVATE_NETWORKS is on (every redirect hop is checked), within a
    whole-fetch deadline, and never more than MAX_LIST_BYTES."""
    shown = shown_url(url)
    if not url.startswith(("http://", "https://")):
        raise ImportFailed("the list URL must start with http:// or https://")
    if problem := url_problem(url):  # before the fetcher, whose error would repeat the URL
        raise ImportFailed(f"could not fetch {shown}: {problem}")
    guard = netguard.check_url if settings.CRAWLHUB_BLOCK_PRIVATE_NETWORKS else None
    with Fetcher(
        timeout=FETCH_TIMEOUT, total_timeout=FETCH_DEADLINE, max_bytes=MAX_LIST_BYTES,
        user_agent_mode="fixed", pool_size=1, max_redirects=MAX_REDIRECTS, guard=guard,
    ) as fetcher:  # fmt: skip
        result = fetcher.fetch(url)
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
        _events(done, ProxyEvent.Kind.REMOVED, user=user, actor=actor, detail=why)
        _announce()
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
        _events(done, ProxyEvent.Kind.DISABLED, user=user, actor=actor, detail=why)
        _announce()
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
            _event(proxy, ProxyEvent.Kind.ENABLED, user=user, actor=actor)
            done.append(proxy)
        if done:
            request_validation(proxies=done)
            _announce()
    return done


def request_validation(*, proxies: Iterable[Proxy] | None = None) -> None:
    """Validate these proxies (or a full pass) on the control queue, after commit."""
    ids = None if proxies is None else [p.pk for p in proxies]

    def enqueue() -> None:
        from proxies.jobs import validate_proxies

        django_rq.get_queue("control").enqueue(validate_proxies, proxy_ids=ids)

    transaction.on_commit(enqueue)


def record_validation(*, proxy: Proxy, result) -> Proxy:
    """Store one validation outcome: the pool's score (Redis decides, atomically), latency,
    anonymity and state. Success admits a new proxy; a refused connection or score 0 removes."""
    with transaction.atomic():
        proxy = Proxy.objects.select_for_update().get(pk=proxy.pk)
        if proxy.state == ProxyState.REMOVED:
            return proxy
        admit = proxy.state in (ProxyState.NEW, ProxyState.ACTIVE)
        score, status = pool.record_check(
            proxy=proxy.key, url=proxy.url, ok=result.ok, reason=result.reason,
            latency_ms=result.latency_ms, initial_score=proxy.score, admit=admit,
        )  # fmt: skip
        was = proxy.state
        proxy.score = score
        if result.ok:
            recovered = bool(proxy.last_error)
            proxy.latency_ms = round(result.latency_ms)
            proxy.last_validated_at = timezone.now()
            proxy.anonymity = result.anonymity
            proxy.successes = F("successes") + 1
            proxy.last_error = ""
        else:
            proxy.failures = F("failures") + 1
            proxy.last_error = result.error[:2000]
        if status == "pool":
            proxy.state = ProxyState.ACTIVE
        elif status == "removed":
            proxy.state = ProxyState.REMOVED
            proxy.removed_at = timezone.now()
            proxy.removed_why = (
                "validation: connection refused"
                if result.reason == "refused"
                else f"validation: score fell to 0 ({result.reason})"
            )
        proxy.save()
        proxy.refresh_from_db()
        if proxy.state == ProxyState.REMOVED:
            pool.remove(proxy=proxy.key)
            _event(proxy, ProxyEvent.Kind.REMOVED, actor="validator", detail=proxy.removed_why)
        elif not result.ok:
            _event(proxy, ProxyEvent.Kind.CHECK_FAILED, actor="validator",
                   detail=f"{result.reason}: {result.error}"[:2000])  # fmt: skip
        elif was == ProxyState.NEW and proxy.state == ProxyState.ACTIVE:
            _event(proxy, ProxyEvent.Kind.ADMITTED, actor="validator", detail=_summary(proxy))
        elif recovered:
            _event(proxy, ProxyEvent.Kind.VALIDATED, actor="validator", detail=_summary(proxy))
        # Many per validation pass: throttled; the page also refreshes every few seconds.
        _announce(force=False)
    return proxy


def _summary(proxy: Proxy) -> str:
    return f"{proxy.latency_ms} ms, {proxy.anonymity or 'anonymity unknown'}, score {proxy.score}"


def sync_from_pool() -> dict:
    """Bring what crawls did in Redis into the inventory: success and failure counts, proxies
    the pool dropped (refused, score 0), and the current score and latency of pooled ones."""
    drained = pool.drain()
    keys = set(drained.successes) | set(drained.failures) | {d[0] for d in drained.dropped}
    pooled = pool.members()
    by_key = {p.key: p for p in Proxy.objects.exclude(state=ProxyState.REMOVED)}
    # One UPDATE per distinct (successes, failures) step, not one per proxy: steps repeat.
    steps: dict[tuple[int, int], list[int]] = defaultdict(list)
    for key in keys & by_key.keys():
        step = (drained.successes.get(key, 0), drained.failures.get(key, 0))
        steps[step].append(by_key[key].pk)
    with transaction.atomic():
        for (successes, failures), ids in steps.items():
            Proxy.objects.filter(pk__in=ids).update(
                successes=F("successes") + successes, failures=F("failures") + failures
            )
        changed = []
        for key, live in pooled.items():
            proxy = by_key.get(key)
            if proxy is not None and proxy.state == ProxyState.ACTIVE:
                proxy.score, proxy.latency_ms = live["score"], round(live["latency_ms"])
                changed.append(proxy)
        Proxy.objects.bulk_update(changed, ["score", "latency_ms"], batch_size=500)
        # What the pool dropped: out of every pool in one round trip, the rows in one UPDATE,
        # the audit rows in one INSERT.
        dropped = {}
        for key, why, at in drained.dropped:
            if (proxy := by_key.get(key)) is not None:
                proxy.state, proxy.removed_why, proxy.score = ProxyState.REMOVED, why, 0
                proxy.removed_at = datetime.fromtimestamp(at, tz=UTC)
                dropped[key] = proxy
        if dropped:
            pool.remove_many(proxies=list(dropped))
            Proxy.objects.bulk_update(
                dropped.values(), ["state", "removed_why", "score", "removed_at"], batch_size=500
            )
            ProxyEvent.objects.bulk_create(
                [ProxyEvent(proxy=proxy, kind=ProxyEvent.Kind.REMOVED, actor="pool",
                            detail=proxy.removed_why) for proxy in dropped.values()],
                batch_size=500,
            )  # fmt: skip
            _announce()
    return {"counted": len(keys), "scored": len(changed), "dropped": len(dropped)}


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


def _event(proxy: Proxy, kind: str, *, user=None, actor: str = "", detail: str = "") -> None:
    _events([proxy], kind, user=user, actor=actor, detail=detail)


def _events(proxies: list[Proxy], kind: str, *, user=None, actor="", detail="") -> None:
    """One audit row per proxy, written in one statement."""
    ProxyEvent.objects.bulk_create(
        [ProxyEvent(proxy=p, kind=kind, user=user, actor=actor, detail=detail) for p in proxies],
        batch_size=500,
    )


def _chunks(items: list, size: int) -> Iterable[list]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def health_snapshot() -> dict:
    """What the Proxies page shows live: the pool's health (Redis) and the inventory (database):
    known / new / active / disabled / removed, and removals in the last hour."""
    by_state = dict(Proxy.objects.values_list("state").annotate(n=Count("pk")).order_by())
    inventory = {state: by_state.get(state, 0) for state in ProxyState.values}
    hour_ago = timezone.now() - timedelta(hours=1)
    return {
        "type": "proxies.health",
        **pool.health(),
        "inventory": {"known": sum(inventory.values()), **inventory},
        "removed_last_hour": ProxyEvent.objects.filter(
            kind=ProxyEvent.Kind.REMOVED, at__gte=hour_ago
        ).count(),
        "at": time.time(),
    }


def publish_health(*, force: bool = True) -> bool:
    """Push health_snapshot() to the open Proxies pages; unless forced, at most once per
    PUBLISH_EVERY_MS across processes. Never raises: the pages refresh on their own too."""
    try:
        if not pool.publish_slot(PUBLISH_EVERY_MS) and not force:
            return False
        async_to_sync(get_channel_layer().group_send)(HEALTH_GROUP, health_snapshot())
        return True
    except Exception:
        log.warning("publishing proxy pool health failed", exc_info=True)
        return False


def _announce(*, force: bool = True) -> None:
    transaction.on_commit(lambda: publish_health(force=force))
