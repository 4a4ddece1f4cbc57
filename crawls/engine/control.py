"""The engine's one face to the services: drive one crawl and read it.

A CrawlControl holds the crawl's frontier, built once per action, and does the Redis side of
each action the services take (start, pause, resume, cancel, retire; change its limits or its
scope; add seeds; retry failures; hold, release or drop a host), the slices' side (enqueue,
stop) and the news (live pages, the end for integrations). The services keep the rows, the
trail and the transaction; what this class does after commit it says so. A crawl's state in
Redis changes before its row: workers see it within a claim.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from django.db import transaction

from crawlhub.redis.connections import RedisMemory
from crawls.engine import jobs, lifecycle, live
from crawls.engine.crawl_settings import scope_of
from crawls.engine.ending import end_line
from crawls.engine.frontier import Frontier, stats_many
from crawls.engine.overflow import Overflow
from crawls.engine.request import VIA_SITEMAP_ROOT, Request
from crawls.engine.scope_changes import drop_out_of_scope, request_fits
from crawls.engine.sitemap_reads import sitemap_roots
from crawls.models import Crawl, EndReason


@dataclasses.dataclass
class ScopeDrop:
    """What a change of a crawl's patterns did to the requests waiting: how many were dropped
    now, whether the rest of a big queue is looked at in a job, and the URLs of the requests
    already claimed that no longer fit (they are fetched)."""

    dropped: int = 0
    dropping: bool = False
    in_flight_urls: list[str] = dataclasses.field(default_factory=list)


class CrawlControl:
    """One crawl, as the services drive it."""

    def __init__(self, crawl: Crawl) -> None:
        self.crawl = crawl
        self.frontier = Frontier(crawl.pk)

    # -- state ------------------------------------------------------------------------------

    def start(self) -> None:
        """Limits, "running", and the seeds (with their sites' sitemaps) the first time only:
        a start that failed half-way (Redis done, row not saved) must not count them twice."""
        self.configure()
        self.frontier.set_state("running")
        if self.frontier.stats()["requests"] == 0:
            self._add_seeds(self.crawl.seeds)
        self.frontier.replicated()

    def pause(self) -> None:
        """Workers stop claiming at once."""
        self.frontier.set_state("paused")
        self.frontier.replicated()

    def resume(self) -> None:
        self.frontier.set_state("running")
        self.frontier.replicated()

    def cancel(self, *, by: str | None) -> tuple[dict, str]:
        """Stop for good, and stop the slices soon (stop_slices_soon); returns the counters as
        they are now and the line that says why the crawl ended (`by`: who cancelled it)."""
        self.frontier.cancel()
        self.frontier.replicated()
        self.stop_slices_soon()
        Overflow(self.frontier).purge()  # what waited in the database: counted by cancel()
        stats = self.frontier.stats()
        return stats, end_line(reason=EndReason.CANCELLED, stats=stats, by=by)

    def retire(self, seconds: int) -> None:
        """Every Redis key of a deleted crawl goes, but its state: "cancelled" for `seconds`,
        for slices still finishing a page."""
        self.frontier.retire(seconds)

    def forget(self) -> None:
        """Every Redis key of a deleted crawl that never ran goes."""
        self.frontier.delete()

    def configure(self) -> None:
        """The limits every claim and completion reads, from the crawl's row as it is."""
        crawl = self.crawl
        self.frontier.configure(
            max_pages=crawl.max_pages,
            max_depth=crawl.max_depth,
            host_delay=crawl.effective_host_delay(),
            host_concurrency=crawl.host_concurrency,
        )

    # -- work -------------------------------------------------------------------------------

    def add_seeds(self, urls: list[str]) -> tuple[int, int]:
        """Queue start URLs (and their sites' sitemaps when the crawl follows them). Returns
        (added, already seen)."""
        counts = self._add_seeds(urls)
        self.frontier.replicated()
        return counts

    def _add_seeds(self, urls: list[str]) -> tuple[int, int]:
        counts = self.frontier.add_seeds(urls)
        if self.crawl.follow_sitemaps:
            self.frontier.add_seeds(sitemap_roots(urls), via=VIA_SITEMAP_ROOT)
        Overflow(self.frontier).balance()  # more than the window: the rest to the database
        return counts

    def retry(self, requests: list[Request], statuses: list[int], *, restart: bool) -> int:
        """Put failed requests back in the queue (their statuses kept for the retry counters);
        with `restart`, the crawl (finished or failed) runs again. Returns how many."""
        count = self.frontier.retry_failed(requests, statuses)
        if restart:
            self.frontier.set_state("running")
        self.frontier.replicated()
        return count

    def rescope(self) -> ScopeDrop:
        """The crawl's patterns changed (saved): slices take them with their next claim; the
        queue and the retries are looked at, the first part now, the rest in a job."""
        gen, claimed = self.frontier.scope_change()
        scope = scope_of(self.crawl)
        done = ScopeDrop(in_flight_urls=[r.url for r in claimed if not request_fits(scope, r)])
        step = drop_out_of_scope(self.crawl, gen=gen)
        done.dropped, cursor = step if step is not None else (0, "")
        if cursor:
            done.dropping = True
            jobs.enqueue_scope_drop(
                self.crawl.pk, gen=gen, cursor=cursor, dropped_before=done.dropped
            )
        return done

    def forget_session_on_commit(self) -> None:
        """A login with the credentials saved now, not the session of the ones replaced."""
        transaction.on_commit(self.frontier.session_forget)

    # -- slices and news (after commit) -----------------------------------------------------

    def enqueue_slices(self, count: int | None = None) -> None:
        """The crawl's slices (or `count` more) on the crawls queue once committed."""
        jobs.enqueue_slices(self.crawl, count=count)

    def stop_slices_soon(self) -> None:
        """Slices still running a few seconds from now are stopped (once the transaction this
        is called in commits, if any): call it once Redis says the crawl is no longer running,
        and before the database is written. A slice stuck in a page may hold the database's
        write lock (SQLite) or a lock on the crawl's row (PostgreSQL) for as long as it runs:
        started after the action's own write, nothing would stop it, and the action waited
        for that lock until it failed."""
        pk = self.crawl.pk
        transaction.on_commit(lambda: jobs.stop_slices_soon(pk))

    def settle_pause(self) -> bool:
        """Pausing becomes paused once nothing is in flight. True when it did."""
        return lifecycle.settle_pause(self.crawl)

    def announce(self, *, state_change: bool = True) -> None:
        """A snapshot to the crawl's live pages once committed."""
        lifecycle.announce(self.crawl.pk, state_change=state_change)

    def announce_end(self, event: str) -> None:
        """The integrations hear that the crawl ended, once committed."""
        lifecycle.announce_end(self.crawl.pk, event)

    # -- reads ------------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        return self.frontier.stats()

    def hosts(self) -> list[dict]:
        """Every host the crawl knows of (Frontier.host_rows), busiest first, with "next_at"
        and "held_until" as datetimes (None for none or past)."""
        now_ms = self.frontier.now_ms()
        rows = self.frontier.host_rows()
        for row in rows:
            for name in ("next_at", "held_until"):
                ms = row[name]
                row[name] = _datetime_of(ms) if ms > now_ms else None
        rows.sort(key=lambda row: (-(row["queued"] + row["in_flight"]), row["host"]))
        return rows

    # -- hosts ------------------------------------------------------------------------------

    def hold_host(self, host: str, *, seconds: float) -> datetime:
        """Ask the host nothing for `seconds` (by Redis' clock); returns until when."""
        until_ms = self.frontier.now_ms() + round(seconds * 1000)
        self.frontier.host_hold(host, until_ms=until_ms)
        return _datetime_of(until_ms)

    def release_host(self, host: str) -> None:
        self.frontier.host_release(host)

    def drop_host(self, host: str) -> int:
        """Drop the host's queued requests and retries, in Redis and in the database; returns
        how many."""
        dropped = self.frontier.host_drop(host)
        # Of what waits in the database, only rows that hold the host's name are read.
        overflow, after = Overflow(self.frontier), 0
        while after is not None:
            more, after = overflow.drop_unfit(
                lambda request: request.host != host, after=after, containing=host, descoped=False
            )
            dropped += more
        return dropped


def stats_of(crawl_ids: list[int]) -> dict[int, dict]:
    """The live counters of many crawls in one Redis round trip."""
    return stats_many(crawl_ids)


def memory_status(crawl: Crawl, memory: RedisMemory) -> dict:
    """Whether Redis' memory holds the crawl back (live.memory_status)."""
    return live.memory_status(crawl, memory)


def progress(crawl: Crawl, stats: dict) -> dict:
    """Done against known work (live.progress)."""
    return live.progress(crawl, stats)


def _datetime_of(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)
