"""Everything that changes the proxy inventory. Views, admin actions, the CLI and the jobs only
parse input and call these: one code path per action, whichever door it came in by.

Imports and large bulk actions run as background jobs (proxies/jobs.py) that change the
inventory BATCH proxies at a time (proxies/inventory.py); the doors answer at once with the job,
whose progress the pages and the API show. The CLI runs the same jobs in its own process.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from django.db.models import F, Q, QuerySet

from proxies import importer, inventory, jobs, lists, pool, validation
from proxies.inventory import disable_proxies, enable_proxies, remove_proxies
from proxies.jobs import Duplicate, ImportReport
from proxies.lists import (
    FETCH_DEADLINE,
    FETCH_TIMEOUT,
    MAX_LIST_BYTES,
    MAX_REDIRECTS,
    ImportFailed,
    decode_list,
    fetch_list,
    shown_url,
)
from proxies.models import Anonymity, Proxy, ProxyJob, ProxyState

__all__ = [
    "FETCH_DEADLINE",
    "FETCH_TIMEOUT",
    "MAX_LIST_BYTES",
    "MAX_REDIRECTS",
    "Duplicate",
    "ImportFailed",
    "ImportReport",
    "decode_list",
    "disable_proxies",
    "enable_proxies",
    "fetch_list",
    "remove_proxies",
    "shown_url",
]

log = logging.getLogger(__name__)

# Never-measured and never-validated proxies go last on every database (SQLite and PostgreSQL
# disagree on where NULL sorts).
SORTS = {
    "score": F("score").desc(),
    "latency": F("latency_ms").asc(nulls_last=True),
    "validated": F("last_validated_at").desc(nulls_last=True),
    "failures": F("failures").desc(),
    "added": F("added_at").desc(),
}
SCORE_RANGES = {
    "0-5": (0, 5),
    "5-6": (5, 6),
    "6-10": (6, 10),
    "10+": (10, None),
}

# A selection up to this size is changed before the answer (one batch); a larger one by a job.
INLINE_LIMIT = jobs.BATCH
ACTIONS = ("remove", "disable", "enable", "validate")


# -- imports ---------------------------------------------------------------------------------


def check_size(text: str) -> None:
    """A pasted or posted list is held to the limit of a file or a download."""
    if len(text.encode()) > MAX_LIST_BYTES:
        raise ImportFailed(f"the list is larger than {MAX_LIST_BYTES // 1024 // 1024} MB")


def start_import(*, text: str, source: str, user=None, actor: str = "") -> ProxyJob:
    """Import a list in the background; the job's page (or status) tells how it goes."""
    check_size(text)
    job = jobs.create_import(text=text, source=source, user=user, actor=actor)
    jobs.enqueue(job)
    return job


def start_import_from_url(*, url: str, user=None, actor: str = "") -> ProxyJob:
    """Fetch and import a list in the background. A URL that cannot be fetched at all (its
    scheme, its form, a private address) is refused now, with ImportFailed."""
    lists.check_url(url)
    job = jobs.create_import(url=url, source=shown_url(url), user=user, actor=actor)
    jobs.enqueue(job)
    return job


def import_proxies(
    *,
    text: str,
    source: str,
    user=None,
    actor: str = "",
    progress: Callable[[ProxyJob], None] | None = None,
) -> ImportReport:
    """Import a list here and now, in the jobs' batches (the CLI): its report. New proxies are
    validated (by a job, after commit) before they enter the pools."""
    check_size(text)
    job = jobs.create_import(text=text, source=source, user=user, actor=actor)
    return import_report(jobs.run_here(job, progress=progress))


def import_from_url(
    *, url: str, user=None, actor: str = "", progress: Callable[[ProxyJob], None] | None = None
) -> ImportReport:
    """import_proxies() for the list at `url`; ImportFailed when it cannot be fetched."""
    text = fetch_list(url=url)
    return import_proxies(
        text=text, source=shown_url(url), user=user, actor=actor, progress=progress
    )


# The Import page lists this many bad lines and duplicates; the whole report is in its JSON.
SHOWN_LINES = jobs.SHOWN_LINES


def job_status(job: ProxyJob, *, report: bool = False) -> dict:
    """A job's state, progress and counts (and its whole report, once an import has ended)."""
    return jobs.status(job, report=report)


def import_report(job: ProxyJob, *, limit: int | None = None) -> ImportReport:
    """An import job's report; ImportFailed with its reason when the import failed."""
    if job.state == ProxyJob.State.FAILED:
        raise ImportFailed(job.error)
    return jobs.import_report(job, limit=limit)


# -- bulk actions ----------------------------------------------------------------------------


@dataclass
class BulkResult:
    action: str
    selected: int
    changed: int = 0  # so far: all of it when done is given, none when a job does it
    done: list[Proxy] | None = None  # the proxies changed already (a small selection)
    job: ProxyJob | None = None  # or the job changing them


def bulk_action(
    *,
    action: str,
    proxies: Iterable[Proxy] | QuerySet = (),
    ids: Iterable[int] = (),
    why: str = "",
    user=None,
    actor: str = "",
) -> BulkResult:
    """Remove, disable, enable or validate a selection of proxies (given as rows, a query, or
    ids). Up to INLINE_LIMIT are changed at once; more by a background job (result.job).
    Validation is always a job."""
    if action not in ACTIONS:
        raise ValueError(f"action must be one of {ACTIONS}, got {action!r}")
    if isinstance(proxies, QuerySet):
        proxies = proxies.values_list("pk", flat=True)
    else:
        proxies = (p.pk for p in proxies)
    selection = sorted({*proxies, *ids})
    if action == "validate":
        validation.request_validation(ids=selection)
        return BulkResult(action, len(selection), changed=len(selection))
    if len(selection) > INLINE_LIMIT:
        job = jobs.create_action(kind=action, ids=selection, why=why, user=user, actor=actor)
        jobs.enqueue(job)
        return BulkResult(action, len(selection), job=job)
    rows = [Proxy(pk=pk) for pk in selection]  # the change locks and reads the rows itself
    if action == "enable":
        done = enable_proxies(proxies=rows, user=user, actor=actor)
    else:
        change = remove_proxies if action == "remove" else disable_proxies
        done = change(proxies=rows, why=why, user=user, actor=actor)
    return BulkResult(action, len(selection), changed=len(done), done=done)


def resolve(*, addresses: Iterable[str]) -> tuple[list[Proxy], list[str]]:
    """Proxies named host:port or scheme://host:port (credentials ignored); and the unknown.
    A query per CHUNK hosts, not per address."""
    wanted: list[tuple[str, importer.Parsed | None]] = []
    for address in addresses:
        parsed = importer.parse_line(address)
        wanted.append((address, None if isinstance(parsed, importer.LineError) else parsed))
    hosts = sorted({parsed.host for _, parsed in wanted if parsed is not None})
    by_host: dict[tuple[str, int], list[Proxy]] = {}
    for chunk in inventory.chunks(hosts):
        for proxy in Proxy.objects.filter(host__in=chunk).order_by("pk"):
            by_host.setdefault((proxy.host.lower(), proxy.port), []).append(proxy)
    found, unknown = [], []
    for address, parsed in wanted:
        matches = [] if parsed is None else by_host.get((parsed.host, parsed.port), [])
        if parsed is not None and "://" in address:
            matches = [p for p in matches if p.scheme == parsed.scheme]
        found += matches
        if not matches:
            unknown.append(address)
    return found, unknown


def known_ids(ids: Iterable[int]) -> tuple[list[int], list[int]]:
    """(the ids of proxies in the inventory, the others), in batches of query parameters."""
    wanted = sorted(set(ids))
    found: set[int] = set()
    for chunk in inventory.chunks(wanted):
        found.update(Proxy.objects.filter(pk__in=chunk).values_list("pk", flat=True))
    return sorted(found), [pk for pk in wanted if pk not in found]


def removed_left_out(params) -> int:
    """How many removed proxies the list leaves out with these filters: all of them when no
    state, search or `all` is asked for (the default list), else none."""
    if params.get("state") or params.get("q") or params.get("all"):
        return 0
    return Proxy.objects.filter(state=ProxyState.REMOVED).count()


def filter_proxies(params, query: QuerySet | None = None) -> QuerySet:
    """The list filters shared by the page (and its CLI/JSON twin): state, channel, score range,
    anonymity, source, search; plus the sort."""
    query = Proxy.objects.all() if query is None else query
    if state := params.get("state"):
        query = query.filter(state=state)
    elif not (params.get("all") or params.get("q")):  # a search looks at every state
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
