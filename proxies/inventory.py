"""Changing the proxy inventory one batch at a time: each call is one short transaction (a few
statements whatever the batch holds) plus one Redis round trip for the pools. A large import or
bulk action is many such calls (proxies/jobs.py), so no one waits long for the database.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from django.db import transaction
from django.utils import timezone

from proxies import importer, pool, validation
from proxies.health import announce
from proxies.models import Proxy, ProxyEvent, ProxyJob, ProxyState, pool_key

# Rows per statement: well under every database's limit on query parameters.
CHUNK = 500


def chunks(items: list, size: int = CHUNK) -> Iterator[list]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def existing(items: Iterable[importer.Parsed]) -> dict[tuple[str, str, int], Proxy]:
    """The inventory's proxies at these addresses, by address: a query per scheme and CHUNK
    hosts, on the (scheme, host, port) index."""
    hosts: dict[str, set[str]] = {}
    for item in items:
        hosts.setdefault(item.scheme, set()).add(item.host)
    found = {}
    for scheme, names in sorted(hosts.items()):
        for chunk in chunks(sorted(names)):
            for proxy in Proxy.objects.filter(scheme=scheme, host__in=chunk):
                found[proxy.address] = proxy
    return found


def add_proxies(
    *, items: list[importer.Parsed], job: ProxyJob, source: str, user=None, actor: str = ""
) -> tuple[list[Proxy], list[tuple[int, str, str]]]:
    """Store a batch of an import's proxies (distinct addresses): (the proxies added, and
    (line, proxy, why) for each already in the inventory). Rows inserted by someone else at the
    same moment are duplicates too (the insert skips them instead of failing)."""
    with transaction.atomic():
        known = existing(items)
        duplicates, fresh = [], []
        for item in items:
            if (proxy := known.get(item.address)) is not None:
                why = f"already in the inventory ({proxy.get_state_display().lower()})"
                duplicates.append((item.line, proxy.masked_url, why))
            else:
                fresh.append(item)
        Proxy.objects.bulk_create(
            [
                Proxy(
                    scheme=item.scheme,
                    host=item.host,
                    port=item.port,
                    username=item.username,
                    password=item.password,
                    source=source[:500],
                    added_by=user,
                    import_job=job,
                )
                for item in fresh
            ],
            batch_size=CHUNK,
            ignore_conflicts=True,
        )
        stored = existing(fresh)
        added = []
        for item in fresh:
            proxy = stored.get(item.address)
            if proxy is not None and proxy.import_job_id == job.pk:
                added.append(proxy)
            else:  # imported by someone else a moment ago
                duplicates.append((item.line, pool_key(*item.address), "already in the inventory"))
        ProxyEvent.record(added, ProxyEvent.Kind.IMPORTED, user=user, actor=actor, detail=source)
        if added:
            announce(force=False)
    return added, duplicates


def remove_proxies(
    *, proxies: Iterable[Proxy], why: str, user=None, actor: str = "", publish: bool = True
) -> list[Proxy]:
    """Out of every Redis pool at once, state removed, and an audit row saying who and why.
    publish=False: the open Proxies pages hear of it within a moment (throttled), not at once."""
    why = why.strip() or "no reason given"
    with transaction.atomic():
        done = [proxy for proxy in _lock(proxies) if proxy.can_remove()]
        pool.remove_many(proxies=[proxy.key for proxy in done])
        changes = {
            "state": ProxyState.REMOVED,
            "removed_at": timezone.now(),
            "removed_by": user,
            "removed_why": why,
        }
        _update(done, changes)
        ProxyEvent.record(done, ProxyEvent.Kind.REMOVED, user=user, actor=actor, detail=why)
        announce(force=publish)
    return done


def disable_proxies(
    *, proxies: Iterable[Proxy], why: str = "", user=None, actor: str = "", publish: bool = True
) -> list[Proxy]:
    """Out of the pools but kept in the inventory, to be enabled again later."""
    with transaction.atomic():
        done = [proxy for proxy in _lock(proxies) if proxy.can_disable()]
        pool.remove_many(proxies=[proxy.key for proxy in done])
        _update(done, {"state": ProxyState.DISABLED})
        ProxyEvent.record(done, ProxyEvent.Kind.DISABLED, user=user, actor=actor, detail=why)
        announce(force=publish)
    return done


def enable_proxies(
    *,
    proxies: Iterable[Proxy],
    user=None,
    actor: str = "",
    validate: bool = True,
    publish: bool = True,
) -> list[Proxy]:
    """Back to new: validated again, then it enters the pools. A removed proxy starts over.
    validate=False leaves asking for the validation to the caller (a job asks once, at its end).
    """
    with transaction.atomic():
        done = [proxy for proxy in _lock(proxies) if proxy.can_enable()]
        cleared = {
            "state": ProxyState.NEW,
            "removed_at": None,
            "removed_by": None,
            "removed_why": "",
        }
        removed = [p for p in done if p.state == ProxyState.REMOVED]
        others = [p for p in done if p.state != ProxyState.REMOVED]
        _update(removed, {**cleared, "score": pool.INITIAL_SCORE})
        _update(others, cleared)
        pool.allow_many(proxies=[proxy.key for proxy in done])
        ProxyEvent.record(done, ProxyEvent.Kind.ENABLED, user=user, actor=actor)
        if done:
            if validate:
                validation.request_validation(proxies=done)
            announce(force=publish)
    return done


def _update(proxies: list[Proxy], changes: dict) -> None:
    """The same change to every one of `proxies`: one UPDATE (per CHUNK), and the objects."""
    for chunk in chunks(proxies):
        Proxy.objects.filter(pk__in=[p.pk for p in chunk]).update(**changes)
    for proxy in proxies:
        for name, value in changes.items():
            setattr(proxy, name, value)


def _lock(proxies: Iterable[Proxy]) -> list[Proxy]:
    ids = [p.pk for p in proxies]
    return list(Proxy.objects.select_for_update().filter(pk__in=ids).order_by("pk"))
