"""A simulated crawl through the frontier's own calls until it has discovered 10,000,000 URLs,
the queue's window on: Redis memory, database size and pages/s from the first million to the
last, and what spilling and refilling cost.

    .venv/bin/python bench/big_frontier.py                          # 10,000,000 URLs
    .venv/bin/python bench/big_frontier.py --urls 200000 --every 20000   # a minute

Its own embedded Redis and SQLite database in a temporary folder, as overflow_memory.py (whose
helpers it uses); DATABASE_URL=postgres://... measures PostgreSQL instead. One process plays a
slice's part with the calls a slice makes (crawls/engine/slices.py): claim a batch, the
overflow's balance with the sizes that claim saw, then complete the batch, each page with
--links links (--new of them URLs never seen, the rest links to URLs seen before, so that
dedup works). Once --urls URLs are discovered, pages bring only links seen before and the
crawl goes on draining its queue (what is in the database comes back) for --drain-seconds.

Printed at each --every URLs discovered and each --every pages completed: pages/s over that
stretch, CPU per page (this process and Redis' INFO cpu), Redis used_memory and its peak, rows
in the spill table, the database's size, and the spills and refills of the stretch (requests
moved, wall time, this process' CPU, Redis' CPU). At the end: Redis' peak, the database's
size, the first stretch's rate against the last, the frontier's counter invariant, and that
nothing was lost or done twice (every completion a URL not completed before; completed +
queued + spilled = discovered). See bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from overflow_memory import Clock, environment, redis_cpu, running_crawl  # noqa: E402

MB = 1024 * 1024
PARTS = ("responses", "errors", "queued", "delayed", "in_flight", "cancelled", "spilled")


@dataclass
class Stretch:
    """What happened since the last printed line."""

    started: float = field(default_factory=time.perf_counter)
    cpu: float = field(default_factory=time.process_time)
    redis_cpu: float = 0.0
    pages: int = 0
    spilled: int = 0
    refilled: int = 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--urls", type=int, default=10_000_000, help="URLs to discover")
    parser.add_argument("--window", type=int, help="CRAWLHUB_FRONTIER_WINDOW (default: 100,000)")
    parser.add_argument("--links", type=int, default=20, help="links a page")
    parser.add_argument("--new", type=int, default=16, help="of which never seen before")
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100, help="requests a claim and complete")
    parser.add_argument("--every", type=int, default=1_000_000, help="a line every N")
    parser.add_argument(
        "--drain-seconds",
        type=float,
        default=600,
        help="how long to go on completing once every URL is discovered (0: until done)",
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=0,
        help="end after this long, discovered or not, with the summary (0: no limit); "
        "SIGINT and SIGTERM end it the same way",
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if not 0 < args.new <= args.links:
        raise SystemExit(f"--new {args.new}: must be 1 to --links ({args.links})")
    if args.window:
        os.environ["CRAWLHUB_FRONTIER_WINDOW"] = str(args.window)
    with environment() as folder:
        run(args, folder)


def database_bytes(folder: Path) -> int:
    from django.db import connection

    from crawls.models import SpilledRequest

    if connection.vendor == "sqlite":
        return sum(p.stat().st_size for p in folder.glob("crawlhub.sqlite3*"))
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_total_relation_size(%s)", [SpilledRequest._meta.db_table])
        return int(cursor.fetchone()[0])


def run(args: argparse.Namespace, folder: Path) -> None:
    from django.conf import settings

    from crawls.engine.overflow import Overflow
    from crawls.engine.request import Outcome
    from crawls.models import SpilledRequest

    crawl, frontier = running_crawl("big frontier bench")
    overflow = Overflow(frontier)
    redis = frontier.redis
    window = overflow.window
    rng = random.Random(args.seed)
    hosts = args.hosts

    def url(k: int) -> str:
        return f"http://h{k % hosts}.example.com/p/{k}"

    # URL k is the k-th discovered; done[k] says it was completed (twice is a defect).
    done = bytearray(args.urls + hosts)
    frontier.add_seeds([url(k) for k in range(hosts)])
    made = hosts  # URLs sent as new links so far (the seeds included)
    repeats = completed = 0
    spilling, refilling = Clock(redis), Clock(redis)
    spills = refills = 0
    print(
        f"== a crawl to {args.urls:,} URLs discovered: pages of {args.links} links "
        f"({args.new} new), {hosts} hosts, window {window:,} (CRAWLHUB_FRONTIER_WINDOW), "
        f"claims and completions of {args.batch}, {settings.DATABASES['default']['ENGINE']}",
        flush=True,
    )
    header = (
        f"{'discovered':>11}{'completed':>11}{'elapsed':>9}{'pages/s':>9}{'CPU ms/p':>9}"
        f"{'Redis MB':>9}{'peak':>7}{'spilled rows':>13}{'DB MB':>7}"
        f"{'spilled':>9}{'s (CPU, Redis)':>19}{'refilled':>9}{'s (CPU, Redis)':>19}{'load':>6}"
    )
    print(header, flush=True)
    stretch = Stretch(redis_cpu=redis_cpu(redis))
    # (what crossed a mark, pages, pages/s, spilled, refilled) of each stretch
    lines: list[tuple[str, int, float, int, int]] = []
    started = time.perf_counter()
    next_found = next_done = args.every
    drain_until = None
    give_up = started + args.seconds if args.seconds else float("inf")
    stop = []  # SIGINT or SIGTERM: end at the next batch, with the summary
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, lambda signum, frame: stop.append(signum))
    spill_marks = (spilling.wall, spilling.cpu, spilling.redis)
    refill_marks = (refilling.wall, refilling.cpu, refilling.redis)

    def line(what: str) -> None:
        nonlocal stretch, spill_marks, refill_marks
        now, cpu, rcpu = time.perf_counter(), time.process_time(), redis_cpu(redis)
        seconds = now - stretch.started
        rate = stretch.pages / seconds if seconds else 0.0
        per_page = (cpu - stretch.cpu + rcpu - stretch.redis_cpu) / max(1, stretch.pages)
        memory = redis.info("memory")
        stats = frontier.stats()
        rows = SpilledRequest.objects.filter(crawl_id=crawl.pk).count()
        spill = [
            a - b
            for a, b in zip((spilling.wall, spilling.cpu, spilling.redis), spill_marks, strict=True)
        ]
        refill = [
            a - b
            for a, b in zip(
                (refilling.wall, refilling.cpu, refilling.redis), refill_marks, strict=True
            )
        ]
        print(
            f"{stats['requests']:>11,}{completed:>11,}{now - started:>9.0f}{rate:>9.0f}"
            f"{per_page * 1000:>9.2f}{int(memory['used_memory']) / MB:>9.1f}"
            f"{int(memory['used_memory_peak']) / MB:>7.0f}{rows:>13,}"
            f"{database_bytes(folder) / MB:>7.0f}{stretch.spilled:>9,}"
            f"{'{:.1f} ({:.1f}, {:.1f})'.format(*spill):>19}{stretch.refilled:>9,}"
            f"{'{:.1f} ({:.1f}, {:.1f})'.format(*refill):>19}{os.getloadavg()[0]:>6.1f}  {what}",
            flush=True,
        )
        lines.append((what, stretch.pages, rate, stretch.spilled, stretch.refilled))
        # The next stretch starts after this line's own reads (a count of millions of rows).
        stretch = Stretch(redis_cpu=redis_cpu(redis))
        spill_marks = (spilling.wall, spilling.cpu, spilling.redis)
        refill_marks = (refilling.wall, refilling.cpu, refilling.redis)

    while True:
        claimed = frontier.claim(args.batch, lease_seconds=600)
        queued, spilled = frontier.queued_seen, frontier.spilled_seen
        if queued > window:
            with spilling:
                moved = overflow.balance(queued=queued, spilled=spilled)
            spills, stretch.spilled = spills + 1, stretch.spilled + moved
        elif spilled > 0 and queued < window // 4:
            with refilling:
                moved = overflow.balance(queued=queued, spilled=spilled)
            refills, stretch.refilled = refills + 1, stretch.refilled + moved
        if not claimed:
            if frontier.is_done():
                break
            continue
        outcomes = []
        for request in claimed:
            k = int(request.url.rsplit("/", 1)[1])
            if done[k]:
                raise SystemExit(f"URL {k} ({request.url}) completed twice")
            done[k] = 1
            fresh = min(args.new, args.urls - made)
            links = [url(k) for k in range(made, made + fresh)]
            made += fresh
            links += [url(rng.randrange(made)) for _ in range(args.links - fresh)]
            repeats += args.links - fresh
            outcomes.append(Outcome(request=request, kind="done", status=200, links=links))
        frontier.complete(outcomes)
        completed += len(claimed)
        stretch.pages += len(claimed)
        if made >= next_found:
            line(f"{next_found:,} discovered")
            next_found += args.every
        if completed >= next_done:
            line(f"{next_done:,} completed")
            next_done += args.every
        if made >= args.urls and drain_until is None:
            drain_until = time.perf_counter() + (args.drain_seconds or float("inf"))
        if drain_until is not None and time.perf_counter() > drain_until:
            break
        if stop or time.perf_counter() > give_up:
            print(
                "ended early: " + (f"signal {stop[0]}" if stop else f"--seconds {args.seconds:g}")
            )
            break
    line("end")
    summary(args, frontier, crawl, folder, lines, completed, made, repeats, done)
    spilled_in_all = sum(stretch_spilled for _, _, _, stretch_spilled, _ in lines)
    refilled_in_all = sum(stretch_refilled for _, _, _, _, stretch_refilled in lines)
    print(
        f"spilling              {spilled_in_all:,} requests in {spills:,} calls: "
        + spilling.per(spilled_in_all)
    )
    print(
        f"refilling             {refilled_in_all:,} requests in {refills:,} calls: "
        + refilling.per(refilled_in_all)
    )
    frontier.delete()
    crawl.delete()


def summary(args, frontier, crawl, folder, lines, completed, made, repeats, done) -> None:
    from crawls.models import SpilledRequest

    stats = frontier.stats()
    memory = frontier.redis.info("memory")
    rows = SpilledRequest.objects.filter(crawl_id=crawl.pk).count()
    print(
        f"\nRedis peak            {int(memory['used_memory_peak']) / MB:,.1f} MB (used_memory_peak)"
    )
    print(f"database              {database_bytes(folder) / MB:,.0f} MB, {rows:,} spilled rows")
    for kind in ("discovered", "completed"):
        rates = [(what, rate) for what, _, rate, _, _ in lines if what.endswith(kind)]
        if len(rates) >= 2:
            (first, a), (last, b) = rates[0], rates[-1]
            print(
                f"pages/s by {kind:<10} first stretch ({first}) {a:,.0f}, last ({last}) {b:,.0f}: "
                f"{100 * (b / a - 1):+.1f} %"
            )
    total = sum(stats[name] for name in PARTS)
    print(
        f"counters              requests {stats['requests']:,} = "
        + " + ".join(f"{name} {stats[name]:,}" for name in PARTS)
        + (" (exact)" if total == stats["requests"] else f" MISMATCH: the sum is {total:,}")
    )
    checks = {
        "discovered == URLs sent as new": stats["requests"] == made,
        "completed == responses": stats["responses"] == completed == sum(done),
        "completed + queued + spilled == discovered": completed
        + stats["queued"]
        + stats["in_flight"]
        + stats["spilled"]
        == made,
        "spilled == rows in the database": stats["spilled"] == rows,
        "repeats == links to URLs seen before": stats["repeats"] == repeats,
    }
    for what, ok in checks.items():
        print(f"{'ok  ' if ok else 'FAIL'}  {what}")
    print(f"repeats               {stats['repeats']:,} (links to URLs seen before: {repeats:,})")


if __name__ == "__main__":
    main()
