"""Live crawl snapshots: what the crawl pages show, built from one Redis read, and the
throttled publisher that pushes them to the pages' websocket groups.

Snapshots, never deltas: channels-redis drops messages silently past a channel's capacity, and
a page that missed one is right again with the next. Every snapshot is
``{"type": "crawl.stats", ...}``; the list page gets a compact one.
"""

from __future__ import annotations

import logging
import time

import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from crawlhub.dates import machine
from crawlhub.redis.connections import REDIS_ERRORS, RedisMemory, redis_memory
from crawls.engine.ending import memory_line, stalled_line
from crawls.engine.frontier import SERIES_POINTS, Frontier, live_views
from crawls.engine.sharing import fair_share, running_footprints, waits_for_memory
from crawls.models import Crawl, EndReason

log = logging.getLogger(__name__)

LIST_GROUP = "crawls"
# At most this often per crawl, across every worker process (a Redis SET NX PX slot).
PUBLISH_EVERY_MS = 250
# A trailing publish polls for the slot this often, and waits this much past its expiry.
TRAILING_POLL_SECONDS = 0.05
TRAILING_MARGIN_SECONDS = 0.01
# Pushed snapshots carry the last minute of the chart; the first one (connect, JSON) ten.
PUSH_POINTS = 60
RATE_WINDOW_SECONDS = 5
HOSTS_SHOWN = 20
# The list page needs only these.
LIST_COUNTERS = ("requests", "responses", "errors", "failed", "queued", "in_flight")


def crawl_group(crawl_id: int) -> str:
    return f"crawl.{crawl_id}"


def rate(series: list[tuple[int, int]], *, window: int = RATE_WINDOW_SECONDS) -> float:
    """Pages per second over about the last `window` seconds of the series."""
    if len(series) < 2:
        return 0.0
    end_t, end_n = series[-1]
    start_t, start_n = series[0]
    for t, n in reversed(series[:-1]):
        start_t, start_n = t, n
        if end_t - t >= window:
            break
    if end_t <= start_t:
        return 0.0
    return round(max(0, end_n - start_n) / (end_t - start_t), 1)


def snapshot(crawl: Crawl, *, points: int = SERIES_POINTS, record: bool = False) -> dict:
    """The one snapshot shape pages poll and websockets push: counters, rate, chart series,
    queue size per host. One Redis round trip; when Redis is away, the saved counters and the
    error."""
    try:
        view = Frontier(crawl.pk).live_view(points=points, record=record and crawl.is_active())
    except REDIS_ERRORS as exc:
        view = exc
    return _snapshot(crawl, view)


def list_rows(crawls: list[Crawl], *, points: int) -> list[dict]:
    """compact(snapshot(crawl)) of many crawls in one Redis round trip (no queue per host)."""
    try:
        views = live_views([crawl.pk for crawl in crawls], points=points, hosts=False)
    except REDIS_ERRORS as exc:
        views = dict.fromkeys((crawl.pk for crawl in crawls), exc)
    return [compact(_snapshot(crawl, views[crawl.pk])) for crawl in crawls]


def _snapshot(crawl: Crawl, view: dict | Exception) -> dict:
    """The snapshot of a crawl from its frontier's live view, or from the error reading it."""
    base = {
        "type": "crawl.stats",
        "id": crawl.pk,
        "owner": crawl.created_by_id,
        "state": crawl.state,
        "state_label": crawl.get_state_display(),
        "max_pages": crawl.max_pages,
        "started_at": machine(crawl.started_at),
        "finished_at": machine(crawl.finished_at),
        "actions": actions(crawl),
        # When the counters were read, by Redis' clock: snapshots published by several
        # processes arrive in any order, and the pages keep the latest read. None when Redis
        # could not be read: this host's clock is not Redis' (another machine's, maybe seconds
        # apart), and the pages show a snapshot without `at` as it comes.
        "at": None if isinstance(view, Exception) else view["at"],
    }
    if isinstance(view, Exception):
        stats = with_derived({**crawl.stats, "redis_error": str(view)})
        memory = _memory_past_maxmemory(view)
        return {
            **base,
            "stats": stats,
            "rate": 0.0,
            "rate_average": False,
            "series": [],
            "hosts": [],
            "progress": progress(crawl, stats),
            "waiting": False,
            "end": status_line(crawl, stats, waiting=False, memory=memory),
        }
    # A crawl that ended shows what was saved when it ended (cancel drops the queue).
    stats = with_derived(crawl.stats if crawl.is_over() and crawl.stats else view["stats"])
    hosts = sorted(view["hosts"].items(), key=lambda item: (-item[1], item[0]))
    series = view["series"]
    waiting = waiting_for_worker(crawl, stats, view.get("slices_running", 0))
    return {
        **base,
        "stats": stats,
        "rate": average_rate(crawl, stats)
        if crawl.is_over()
        else (rate(series) if crawl.is_active() else 0.0),
        "rate_average": crawl.is_over(),
        "series": series,
        "hosts": hosts[:HOSTS_SHOWN],
        "hosts_total": len(hosts),
        "progress": progress(crawl, stats),
        "waiting": waiting,
        "end": status_line(crawl, stats, waiting=waiting, memory=view.get("memory")),
    }


def _memory_past_maxmemory(error: Exception) -> RedisMemory | None:
    """Redis' memory when `error` is Redis refusing for its maxmemory (it refuses a MULTI
    whole then, reads too; INFO still answers), so that the page says why; else None."""
    if not isinstance(error, redis.exceptions.OutOfMemoryError):
        return None
    try:
        return redis_memory()
    except REDIS_ERRORS:
        return None


def average_rate(crawl: Crawl, stats: dict) -> float:
    """Pages per second from start to end: what a crawl that ended did, rather than a 0.0
    that says nothing."""
    if not (crawl.started_at and crawl.finished_at):
        return 0.0
    end = crawl.finished_at
    seconds = (end - crawl.started_at).total_seconds()
    return round(int(stats.get("responses", 0)) / seconds, 1) if seconds > 0 else 0.0


def with_derived(stats: dict) -> dict:
    """The counters plus those the pages show that are sums of others: "no_response" (errors
    that got no HTTP answer at all; the other errors are in their status class too)."""
    errors, failed_http = int(stats.get("errors", 0)), int(stats.get("failed_http", 0))
    return {**stats, "no_response": max(0, errors - failed_http)}


def progress(crawl: Crawl, stats: dict) -> dict:
    """Work done against work known: "done" requests answered or given up (responses +
    errors), "known" every request scheduled, the cancelled ones included (a cancel, a dropped
    host: work left undone); "capped" once max pages stops the crawl scheduling more, so that
    "known" is all there will be. 100 percent only when every known request was done and
    nothing was refused by the cap: work left undone never reads 100."""
    done = int(stats.get("responses", 0)) + int(stats.get("errors", 0))
    requests = int(stats.get("requests", 0))
    known = max(done, requests)
    percent = 100 * done // known if known else 0
    # Finished with every URL done, or failed with every request tried (none answered).
    complete = done >= known and (
        (crawl.state == "finished" and crawl.end_reason in ("", EndReason.FINISHED))
        or crawl.state == "failed"
    )
    if percent == 100 and not complete:
        percent = 99
    return {
        "done": done,
        "known": known,
        "percent": percent,
        "capped": crawl.max_pages > 0 and requests >= crawl.max_pages,
        "open": not crawl.is_over(),
    }


def status_line(
    crawl: Crawl, stats: dict, *, waiting: bool, memory: RedisMemory | None = None
) -> dict:
    """Why the crawl ended (its saved reason and line), "memory" while it runs and Redis holds
    its budget of memory (slices claim nothing then), or "stalled" while it waits for a
    worker; empty otherwise."""
    if crawl.is_over():
        return {"reason": crawl.end_reason, "line": crawl.end_line}
    if memory is not None and (held := memory_status(crawl, memory))["reason"]:
        return held
    if waiting:
        return {"reason": "stalled", "line": stalled_line(stats)}
    return {"reason": "", "line": ""}


def memory_status(
    crawl: Crawl, memory: RedisMemory, *, footprints: dict[int, int] | None = None
) -> dict:
    """ "memory" and its line while the crawl runs and waits for Redis memory (its slices claim
    nothing: crawls.engine.sharing.waits_for_memory, by what the running crawls hold,
    `footprints`, read here when not given); empty otherwise."""
    if memory.full and crawl.state == "running":
        if memory.stopped:  # every crawl waits (past maxmemory Redis would refuse the read)
            footprints = {}
        elif footprints is None:
            try:
                footprints = running_footprints()
            except REDIS_ERRORS:
                footprints = {}
        if waits_for_memory(memory, crawl_id=crawl.pk, footprints=footprints):
            line = memory_line(
                memory,
                held=footprints.get(crawl.pk, 0),
                share=fair_share(footprints),
                running=len(footprints),
            )
            return {"reason": "memory", "line": line}
    return {"reason": "", "line": ""}


def waiting_for_worker(crawl: Crawl, stats: dict, slices_running: int) -> bool:
    """A running crawl with work queued that no slice is fetching: every worker is busy with
    other jobs, or none is running."""
    return (
        crawl.state == "running"
        and not stats.get("in_flight")
        and not slices_running
        and bool(stats.get("queued") or stats.get("delayed"))
    )


def actions(crawl: Crawl) -> list[str]:
    """The buttons the page should offer in this state."""
    allowed = {
        "start": crawl.can_start(),
        "pause": crawl.can_pause(),
        "resume": crawl.can_resume(),
        "cancel": crawl.can_cancel(),
    }
    return [name for name, ok in allowed.items() if ok]


def compact(full: dict) -> dict:
    """The list page's row of a snapshot."""
    stats = full["stats"]
    return {
        "type": "crawl.stats",
        "id": full["id"],
        "owner": full["owner"],
        "state": full["state"],
        "state_label": full["state_label"],
        "max_pages": full["max_pages"],
        "rate": full["rate"],
        "started_at": full["started_at"],
        "finished_at": full["finished_at"],
        "actions": full["actions"],
        "at": full["at"],
        "stats": {name: stats.get(name, 0) for name in LIST_COUNTERS},
        "progress": full.get("progress"),
        "end": full.get("end"),
    }


def publish_crawl(crawl_id: int, *, force: bool = False, trailing: bool = False) -> bool:
    """Send the crawl's snapshot to its page group and a compact one to the list group.

    At most one every PUBLISH_EVERY_MS per crawl across all processes; force (a state change)
    always sends and takes the slot. trailing (the last counters of a slice or of an action)
    makes sure they get out when the slot is taken: see _wait_for_slot. Never raises: a page
    missing a snapshot catches up with the next one, and a slice must not fail for it. True
    when a snapshot went out.
    """
    try:
        frontier = Frontier(crawl_id)
        if not (
            frontier.publish_slot(PUBLISH_EVERY_MS)
            or force
            or (trailing and _wait_for_slot(frontier))
        ):
            return False
        crawl = Crawl.objects.filter(pk=crawl_id).first()
        if crawl is None:
            return False
        full = snapshot(crawl, points=PUSH_POINTS, record=True)
        # One event loop, so one channel-layer connection for both sends.
        async_to_sync(_send)(crawl_id, full)
        return True
    except REDIS_ERRORS as exc:  # away or full: the next snapshot catches up
        log.warning("publishing crawl %s failed: Redis: %s", crawl_id, exc)
        return False
    except Exception:
        log.warning("publishing crawl %s failed", crawl_id, exc_info=True)
        return False


def _wait_for_slot(frontier: Frontier) -> bool:
    """Wait for the publish slot that was just refused; True when this caller got it.

    False only once the refused slot has surely expired and another caller took the new one:
    that caller reads its snapshot after ours would have been read, so it carries our counters.
    Blocks for at most PUBLISH_EVERY_MS (plus a margin), in polls of TRAILING_POLL_SECONDS.
    """
    expired = time.monotonic() + PUBLISH_EVERY_MS / 1000 + TRAILING_MARGIN_SECONDS
    while True:
        time.sleep(TRAILING_POLL_SECONDS)
        late = time.monotonic() > expired
        if frontier.publish_slot(PUBLISH_EVERY_MS):
            return True
        if late:
            return False


async def _send(crawl_id: int, full: dict) -> None:
    layer = get_channel_layer()
    await layer.group_send(crawl_group(crawl_id), full)
    await layer.group_send(LIST_GROUP, compact(full))
