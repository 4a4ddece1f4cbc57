"""Redis memory per queued request with the queue's window (crawls/engine/overflow.py), and what
spilling and refilling cost.

Runs its own embedded Redis on a free port and a SQLite database in a temporary folder (nothing
else is touched; DATABASE_URL=postgres://... measures PostgreSQL instead) and prints figures:

    .venv/bin/python bench/overflow_memory.py --urls 200000 --window 20000

1. N seeds through add_seeds, 10,000 at a time, each chunk followed by a balance (as the
   services do): Redis' used_memory per queued request, what waits in Redis and in the
   database, the database's bytes per row, and the time spent spilling.
2. The whole queue claimed and completed (no links), with a balance after each claim (as the
   slices do): the time spent refilling, and that every request came back once.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def environment() -> Iterator[Path]:
    """A temporary folder as CRAWLHUB_DATA_DIR (SQLite unless DATABASE_URL says otherwise),
    an embedded Redis on a free port as REDIS_URL, Django set up and migrated; the folder."""
    with tempfile.TemporaryDirectory() as folder:
        os.environ["CRAWLHUB_DATA_DIR"] = folder
        from crawlhub.processes.launcher import EmbeddedRedis

        server = EmbeddedRedis(Path(folder) / "redis", port=free_port())
        server.start()
        os.environ["REDIS_URL"] = server.url
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crawlhub.settings")
        try:
            import django

            django.setup()  # then what needs Django's settings
            from django.core.management import call_command

            call_command("migrate", verbosity=0)
            yield Path(folder)
        finally:
            server.stop()


def running_crawl(name: str):
    """A crawl (its row, its frontier running: no page cap, no depth limit, no host delay)."""
    from django.contrib.auth import get_user_model

    from crawls import services
    from crawls.engine.frontier import Frontier

    user = get_user_model().objects.create_user(username=f"bench-{time.time_ns()}")
    crawl = services.crawl_create(user=user, name=name, seeds=["http://h0.example.com/"])
    frontier = Frontier(crawl.pk)
    frontier.configure(max_pages=0, max_depth=-1, host_delay=0)
    frontier.set_state("running")
    return crawl, frontier


def redis_cpu(redis) -> float:
    info = redis.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


class Clock:
    """Wall time, this process' CPU time and Redis' CPU time spent inside `with` blocks."""

    def __init__(self, redis) -> None:
        self.redis_client = redis
        self.wall = self.cpu = self.redis = 0.0

    def __enter__(self) -> None:
        self.marks = (time.perf_counter(), time.process_time(), redis_cpu(self.redis_client))

    def __exit__(self, *exc) -> None:
        wall, cpu, rcpu = self.marks
        self.wall += time.perf_counter() - wall
        self.cpu += time.process_time() - cpu
        self.redis += redis_cpu(self.redis_client) - rcpu

    def per(self, n: int) -> str:
        n = max(n, 1)
        return (
            f"{self.wall / n * 1e6:.0f} us wall, {self.cpu / n * 1e6:.0f} us CPU here, "
            f"{self.redis / n * 1e6:.0f} us Redis CPU a request"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=200_000)
    parser.add_argument("--window", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=200, help="requests per claim")
    args = parser.parse_args()
    with environment() as folder:
        run(args, folder)


def run(args: argparse.Namespace, folder: Path) -> None:
    from django.db import connection

    from crawls.engine.overflow import Overflow
    from crawls.engine.request import Outcome
    from crawls.models import SpilledRequest

    crawl, frontier = running_crawl("overflow bench")
    overflow = Overflow(frontier, window=args.window)
    redis = frontier.redis

    def used() -> int:
        return int(redis.info("memory")["used_memory"])

    before, spilling, chunk = used(), Clock(redis), 10_000
    started = time.perf_counter()
    for start in range(0, args.urls, chunk):
        end = min(start + chunk, args.urls)
        frontier.add_seeds([f"http://h{i % 100}.example.com/p/{i}" for i in range(start, end)])
        with spilling:
            overflow.balance()
    elapsed = time.perf_counter() - started
    stats = frontier.stats()
    rows = SpilledRequest.objects.filter(crawl_id=crawl.pk).count()
    seen = sum(
        redis.memory_usage(key, samples=0)
        for key in redis.scan_iter(match=frontier.key("seen:*"), count=1000)
    )
    delta = used() - before
    print(f"== {args.urls:,} seeds through add_seeds + balance, window {args.window:,}")
    print(f"time                          {elapsed:8.1f} s, spilling {spilling.wall:.1f} s")
    print(f"spilling                      {spilling.per(rows)}")
    print(
        f"queued in Redis / spilled     {stats['queued']:,} / {stats['spilled']:,} ({rows:,} rows)"
    )
    print(
        f"used_memory delta / URL       {delta / args.urls:8.2f} bytes "
        "(dedup + what is queued in Redis, over every URL)"
    )
    print(f"  of which the dedup sets     {seen / args.urls:8.2f} bytes")
    if connection.vendor == "sqlite":
        size = sum(p.stat().st_size for p in folder.glob("crawlhub.sqlite3*"))
        print(f"database file / row           {size / max(rows, 1):8.1f} bytes (SQLite, WAL)")

    refilling, count = Clock(redis), 0
    started = time.perf_counter()
    while True:
        got = frontier.claim(args.batch, lease_seconds=600)
        with refilling:
            overflow.balance(queued=frontier.queued_seen, spilled=frontier.spilled_seen)
        if not got and frontier.is_done():
            break
        count += len(got)
        frontier.complete([Outcome(request=r, kind="done", status=200) for r in got])
    claimed = time.perf_counter() - started
    stats = frontier.stats()
    assert count == stats["responses"] == args.urls and stats["spilled"] == 0, stats
    print(f"\n== the whole queue claimed and completed, {args.batch} a claim")
    print(f"time                          {claimed:8.1f} s ({count / claimed:,.0f} requests/s)")
    print(f"refilling                     {refilling.per(rows)}")
    frontier.delete()
    crawl.delete()


if __name__ == "__main__":
    main()
