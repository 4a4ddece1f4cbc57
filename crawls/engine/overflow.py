"""A crawl's queue past its window: the lowest-ranked requests wait in the database
(crawls.models.SpilledRequest) and come back to Redis in rank order as the queue drains.

The window (CRAWLHUB_FRONTIER_WINDOW, W) bounds what a crawl's queue holds in Redis. A queue
past W spills down to 3/4 W; a queue under W/4 with requests in the database is refilled up
to W/2, so that spills and refills go by batches of at least W/4, never per page. Slices look
at the sizes their claims return (claim.lua), the services after adding seeds, and the
supervisor on each pass.

A request is in exactly one place (the database, the queue, the backup with a lease, done or
failed) at every moment, and `spilled` counts those in the database, so the counters add up
(crawls/engine/frontier.py). How a step that spans Redis and the database holds when a
worker is killed or Redis restarts at any point of it:

- One holder at a time: every step runs in a transaction holding a lock in the database (the
  crawl's row, FOR NO KEY UPDATE on PostgreSQL; SQLite's write lock, taken at BEGIN). A holder
  that dies drops its connection, and with it the lock. The holder takes a new token in Redis
  (Frontier.overflow_token) and every write to the overflow's keys carries it: a holder that
  lost its lock and goes on unaware has its writes refused.
- A spill takes the queue's tail into :spilling in one script (counted in `spilled` from then
  on), writes the rows (a row per (crawl, fp): written twice, kept once), commits, and then
  removes them from :spilling.
- A refill reads the next rows by score, puts them into the queue with their scores in one
  script that also notes their fingerprints in :unspilled, removes the rows, commits, and
  then forgets the fingerprints. A holder cut short after the script leaves the rows behind,
  marked in :unspilled, and they are removed, never queued again.
- Neither script starts while :spilling or :unspilled holds anything: the next holder
  finishes the step left first (recover), whoever was cut short where.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator

from django.conf import settings
from django.db import DatabaseError, connection, transaction

from crawlhub.redis.connections import REDIS_ERRORS
from crawls.engine.frontier import Frontier
from crawls.engine.frontier_overflow import OverflowFenced, OverflowStaged
from crawls.engine.request import Request
from crawls.models import Crawl, SpilledRequest

log = logging.getLogger(__name__)

# Requests moved by one step (one script call, one insert or delete in the database).
BATCH = 5_000
# SQL parameters per statement (SQLite allows 32,766; PostgreSQL 65,535).
IN_CHUNK = 1_000


class Overflow:
    """One crawl's overflow. Cheap to create."""

    def __init__(self, frontier: Frontier, *, window: int | None = None) -> None:
        self.frontier = frontier
        self.crawl_id = frontier.crawl_id
        self.window = window if window is not None else settings.CRAWLHUB_FRONTIER_WINDOW

    # What callers use

    def balance(self, *, queued: int | None = None, spilled: int | None = None) -> int:
        """Spill a queue past its window, or refill one that runs low, in batches. `queued`
        and `spilled` as a claim saw them (read here when not given). Returns the requests
        moved (spilled or refilled). A database or Redis that is away, or a lock held long by
        another holder, leaves it for the next time."""
        if queued is None or spilled is None:
            queued, spilled = self.frontier.overflow_sizes()
        try:
            if queued > self.window:
                return self.spill(queued - self.window * 3 // 4)
            if spilled > 0 and queued < self.window // 4:
                return self.refill(self.window // 2 - queued)
        except (DatabaseError, *REDIS_ERRORS) as exc:
            log.warning("crawl %s: the overflow waits (%s)", self.crawl_id, exc)
        return 0

    def tend(self) -> int:
        """The supervisor's pass: finish a step a holder cut short left, then balance()."""
        try:
            taken, unspilled = self.frontier.overflow_staged()
            if taken or unspilled:
                self.recover()
        except (DatabaseError, *REDIS_ERRORS) as exc:
            log.warning("crawl %s: the overflow waits (%s)", self.crawl_id, exc)
            return 0
        return self.balance()

    def spill(self, count: int) -> int:
        """Move the `count` lowest-ranked queued requests to the database, BATCH at a time."""
        moved = 0
        while moved < count:
            size = min(BATCH, count - moved)
            step = self._step(lambda token, size=size: self._spill_batch(token, size))
            if not step:
                break
            moved += step
        return moved

    def refill(self, count: int) -> int:
        """Bring back up to `count` requests from the database, best-ranked first."""
        moved = 0
        while moved < count:
            size = min(BATCH, count - moved)
            step = self._step(lambda token, size=size: self._refill_batch(token, size))
            if not step:
                break
            moved += step
        return moved

    def recover(self) -> None:
        """Finish what a holder cut short left (rows to write, or to remove). The next step
        does this itself; the supervisor calls it too, for a crawl whose queue crosses no
        mark."""
        with self._turn() as token:
            taken, unspilled = self.frontier.overflow_staged()
            if taken:
                self._write(taken)
            if unspilled:
                self._remove(unspilled)
        # After the commit: the rows are written, or removed, for good.
        with contextlib.suppress(OverflowFenced):
            self.frontier.spilled(token, [packed for _, _, packed in taken])
            self.frontier.unspilled(token, unspilled)

    def purge(self) -> int:
        """A cancelled or failed crawl: every row goes (Frontier.cancel counted them in
        "cancelled"). Returns how many rows there were."""
        with self._turn():
            removed = SpilledRequest.objects.filter(crawl_id=self.crawl_id).delete()[0]
        self.frontier.overflow_forget()
        return removed

    def drop_unfit(
        self,
        fits: Callable[[Request], bool],
        *,
        after: int = 0,
        budget: int = 5000,
        batch: int = 500,
        containing: str = "",
        descoped: bool = True,
    ) -> tuple[int, int | None]:
        """Drop the rows `fits` refuses, counted in "cancelled" and (a change of scope,
        `descoped`) in "descoped", looking at about `budget` rows of id > `after` (only those
        whose packed request holds `containing`, any case, when given). Returns (how many
        were dropped, the id to go on after; None once every row was looked at)."""
        dropped, seen = 0, 0
        mode = "drop" if descoped else "cancel"
        rows = SpilledRequest.objects.filter(crawl_id=self.crawl_id).order_by("id")
        if containing:
            rows = rows.filter(packed__icontains=containing)
        while seen < budget:
            found = list(rows.filter(id__gt=after).values_list("id", "packed")[:batch])
            if not found:
                return dropped, None
            after, seen = found[-1][0], seen + len(found)
            doomed = [pk for pk, packed in found if not fits(Request.unpack(packed))]
            if doomed:
                dropped += self._step(lambda token, ids=doomed: self._drop_batch(token, ids, mode))
        return dropped, after

    # The steps, each in one turn of the lock

    @contextlib.contextmanager
    def _turn(self) -> Iterator[str]:
        """A transaction holding the crawl's overflow lock, and the holder's token."""
        with transaction.atomic():
            if connection.vendor != "sqlite":  # SQLite's BEGIN IMMEDIATE took its write lock
                list(
                    Crawl.objects.select_for_update(no_key=True)
                    .filter(pk=self.crawl_id)
                    .values_list("pk", flat=True)
                )
            yield self.frontier.overflow_token()

    def _step(self, work: Callable[[str], tuple[int, Callable[[], None]]]) -> int:
        """One step: its database part in a turn of the lock, then, once committed, what it
        leaves to Redis (taking the written requests out of :spilling, forgetting removed
        rows). When a holder cut short left a step unfinished, that one first."""
        for _ in range(2):
            try:
                with self._turn() as token:
                    moved, after_commit = work(token)
            except OverflowStaged:
                self.recover()
                continue
            except OverflowFenced:
                return 0  # another holder took over meanwhile: the work is theirs
            with contextlib.suppress(OverflowFenced):  # if so, the next holder finishes it
                after_commit()
            return moved
        return 0

    def _spill_batch(self, token: str, count: int) -> tuple[int, Callable[[], None]]:
        taken = self.frontier.spill(token, count)
        self._write(taken)
        return len(taken), lambda: self.frontier.spilled(token, [p for _, _, p in taken])

    def _refill_batch(self, token: str, count: int) -> tuple[int, Callable[[], None]]:
        rows = list(
            SpilledRequest.objects.filter(crawl_id=self.crawl_id)
            .order_by("score", "fp")
            .values_list("fp", "score", "packed")[:count]
        )
        # Called with no rows too: a spill cut short before writing them makes it recover.
        if self.frontier.unspill(token, rows, mode="queue") == 0:
            return 0, lambda: None
        fps = [fp for fp, _, _ in rows]
        self._remove(fps)
        return len(rows), lambda: self.frontier.unspilled(token, fps)

    def _drop_batch(self, token: str, ids: list[int], mode: str) -> tuple[int, Callable[[], None]]:
        # Under the lock every row is counted in `spilled`: those still here are dropped.
        rows = list(
            SpilledRequest.objects.filter(crawl_id=self.crawl_id, id__in=ids).values_list(
                "fp", "score", "packed"
            )
        )
        if not rows or self.frontier.unspill(token, rows, mode=mode) == 0:
            return 0, lambda: None
        fps = [fp for fp, _, _ in rows]
        self._remove(fps)
        return len(rows), lambda: self.frontier.unspilled(token, fps)

    def _write(self, taken: list[tuple[int, int, str]]) -> None:
        """The rows, in one statement run for each (a model instance each cost more than the
        rest of a spill); one already there (the same request, written before a crash) is
        kept as it is."""
        table = connection.ops.quote_name(SpilledRequest._meta.db_table)
        with connection.cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO {table} (crawl_id, fp, score, packed) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT DO NOTHING",
                [(self.crawl_id, fp, score, packed) for fp, score, packed in taken],
            )

    def _remove(self, fps: list[int]) -> None:
        rows = SpilledRequest.objects.filter(crawl_id=self.crawl_id)
        for start in range(0, len(fps), IN_CHUNK):
            rows.filter(fp__in=fps[start : start + IN_CHUNK]).delete()
