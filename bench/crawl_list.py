"""The crawl list with 10,000 crawls: p50 / p95 / max of each screen, against the same screens
with 25 crawls, in the same run.

    .venv/bin/python bench/crawl_list.py                  # SQLite, 10,000 crawls, 20 runs each
    .venv/bin/python bench/crawl_list.py --crawls 50000 --runs 10
    .venv/bin/python bench/crawl_list.py --database-url postgres://u:pw@127.0.0.1:5432/empty_db

A fresh SQLite database and an embedded Redis in a temp dir (CRAWLHUB_DATA_DIR points there);
with --database-url, that database instead (it must be empty: migrations run on it, and its rows
are left). Two users, a staff member and alice; crawls are made as a dashboard's look: a fifth
alice's, mostly finished with their counters copied in, some running, paused or drafts, over a
year, one seed each on a few hundred sites. Each request is the whole page as a browser gets it
(Django's test client: the view, its queries, the counters of the page's rows from Redis and the
template), timed after one warm-up request. The baseline is the same requests when the
database holds 25 crawls; then the rest are bulk-inserted and every request is timed again.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BASELINE_CRAWLS = 25
START = datetime(2025, 11, 1, tzinfo=UTC)
# (label, user, query string)
REQUESTS = [
    ("first page (staff)", "staff", ""),
    ("first page (alice, her own)", "alice", ""),
    ("page 2", "staff", "page=2"),
    ("last page", "staff", "page=last"),
    ("search a name", "staff", "q=prices"),
    ("search a seed", "staff", "q=site17.example"),
    ("search #number", "staff", "q=%2317"),
    ("search with no match", "staff", "q=unicorn"),
    ("state=finished", "staff", "state=finished"),
    ("state=running", "staff", "state=running"),
    ("sort=longest", "staff", "sort=longest"),
    ("sort=name", "staff", "sort=name"),
    ("sort=owner", "staff", "sort=owner"),
    ("state=finished&sort=shortest&q=site", "staff", "state=finished&sort=shortest&q=site"),
]
STATES = [
    ("finished", 70),
    ("cancelled", 8),
    ("failed", 4),
    ("running", 6),
    ("paused", 4),
    ("draft", 8),
]
WORDS = [
    "shop",
    "prices",
    "docs",
    "news",
    "blog",
    "catalogue",
    "archive",
    "forum",
    "jobs",
    "events",
    "wiki",
    "store",
]


def make_crawls(n: int, *, first: int, users: list, rng: random.Random) -> list:
    from crawls.models import Channel, Crawl

    channel = Channel.default()
    states, weights = zip(*STATES, strict=True)
    crawls = []
    for i in range(first, first + n):
        state = rng.choices(states, weights)[0]
        created = START + timedelta(minutes=i * 50 + rng.randrange(30))
        started = created + timedelta(seconds=rng.randrange(1, 60)) if state != "draft" else None
        over = state in ("finished", "cancelled", "failed")
        finished = started + timedelta(seconds=int(rng.lognormvariate(6, 1.5))) if over else None
        pages = rng.randrange(1, 5000)
        stats = {"requests": pages, "responses": pages, "errors": rng.randrange(0, 20)}
        crawls.append(
            Crawl(
                name=f"{rng.choice(WORDS)} {rng.choice(WORDS)} {i}",
                channel=channel,
                seeds=[f"https://site{rng.randrange(300)}.example/{rng.choice(WORDS)}/"],
                state=state,
                created_by=users[0] if rng.random() < 0.2 else users[1],
                started_at=started,
                finished_at=finished,
                stats=stats if over else {},
            )
        )
    made = Crawl.objects.bulk_create(crawls, batch_size=2000)
    # created_at is auto_now_add: set as the list would show a year of crawls.
    for crawl, wanted in zip(made, crawls, strict=True):
        crawl.created_at = wanted.started_at or START + timedelta(minutes=crawl.pk * 50)
    Crawl.objects.bulk_update(made, ["created_at"], batch_size=2000)
    return made


def time_requests(clients: dict, runs: int) -> dict[str, list[float]]:
    from crawls.models import Crawl

    last = max(1, -(-Crawl.objects.count() // 25))
    times: dict[str, list[float]] = {}
    for label, who, query in REQUESTS:
        url = "/?" + query.replace("page=last", f"page={last}")
        client = clients[who]
        response = client.get(url)  # warm-up
        assert response.status_code == 200, (url, response.status_code)
        took = []
        for _ in range(runs):
            started = time.perf_counter()
            response = client.get(url)
            took.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200
        times[label] = took
        print(f"  {label}: p50 {statistics.median(took):.1f} ms", file=sys.stderr, flush=True)
    return times


def p95(values: list[float]) -> float:
    return sorted(values)[max(0, round(0.95 * len(values)) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crawls", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--database-url", default="")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="crawl-list-bench-") as tmp:
        os.environ["CRAWLHUB_DATA_DIR"] = tmp
        os.environ["DATABASE_URL"] = args.database_url or f"sqlite:///{tmp}/bench.sqlite3"
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crawlhub.settings")
        from crawlhub.processes import launcher

        redis = launcher.EmbeddedRedis(Path(tmp) / "redis")
        redis.start(timeout=60)
        os.environ["REDIS_URL"] = redis.url
        try:
            run(args)
        finally:
            redis.stop()


def run(args: argparse.Namespace) -> None:
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    settings.ALLOWED_HOSTS = ["*"]
    call_command("migrate", verbosity=0)
    users = get_user_model().objects
    alice = users.create_user(username="alice", password="x")
    staff = users.create_user(username="staff", password="x", is_staff=True)
    clients = {}
    for name, user in (("alice", alice), ("staff", staff)):
        clients[name] = Client()
        clients[name].force_login(user)
    rng = random.Random(7)

    make_crawls(BASELINE_CRAWLS, first=1, users=[alice, staff], rng=rng)
    baseline = time_requests(clients, args.runs)
    started = time.perf_counter()
    make_crawls(
        args.crawls - BASELINE_CRAWLS, first=BASELINE_CRAWLS + 1, users=[alice, staff], rng=rng
    )
    print(
        f"{connection.vendor}: {args.crawls:,} crawls written in "
        f"{time.perf_counter() - started:.1f} s; {args.runs} runs a request, ms"
    )
    full = time_requests(clients, args.runs)

    print(
        f"{'request':40} {BASELINE_CRAWLS:>5} crawls: p50    p95 | "
        f"{args.crawls:>6,} crawls: p50    p95    max"
    )
    for label, _, _ in REQUESTS:
        base, now = baseline[label], full[label]
        print(
            f"{label:40} {statistics.median(base):18.1f} {p95(base):6.1f} | "
            f"{statistics.median(now):18.1f} {p95(now):6.1f} {max(now):6.1f}"
        )
    slowest = max(REQUESTS, key=lambda r: statistics.median(full[r[0]]))[0]
    then = statistics.median(baseline[slowest])
    print(
        f"slowest with {args.crawls:,} crawls: {slowest}, p50 "
        f"{statistics.median(full[slowest]):.1f} ms, p95 {p95(full[slowest]):.1f} ms "
        f"(with {BASELINE_CRAWLS}: p50 {then:.1f} ms)"
    )


if __name__ == "__main__":
    main()
