"""What one Redis can coordinate: Redis CPU per fetched page, and pages/s per Redis core.

Drives the frontier's own calls, as a slice makes them, from several processes against one
redis-server, with no HTTP at all, so that Redis is the part being measured:

    .venv/bin/python bench/redis_capacity.py                      # 1, 2, 4, 8 processes, 10 s each
    .venv/bin/python bench/redis_capacity.py --procs 2 8 --seconds 20 --runs 3

The server is Debian's redis-server (or whichever crawlhub's launcher finds), started by
crawlhub's own launcher (crawlhub/processes/launcher.py: EmbeddedRedis) on a free loopback
port, so it runs with the product's persistence: appendonly yes, appendfsync everysec, no RDB
snapshots.

Each generator process plays one slice of one crawl, on the link graph of the sample site that
bench/crawl_bench.py crawls (crawlhub.sample_site.SampleSite, one host): it claims batches of
--claim requests (Frontier.claim), "fetches" them at once (a page's outcome is what the site
would answer: 200 with its links, 404, 500, or a redirect whose target goes through the dedup
set as a slice sends it), and completes them in batches of --flush outcomes
(Frontier.complete: leases dropped, each link through the seen sets, new ones queued,
counters bumped). Like a slice it also checks the crawl's state, beats and reads the delayed
hosts every 0.25 s, renews its leases, and after each completion takes the publish slot and,
when it wins it, reads the live view (Frontier.live_view, record=True). The channel-layer send
of a snapshot (at most 4 a second per crawl) and the database are not part of this.

For each process count the parent lets the crawl run --warmup seconds, then samples, over
--seconds, Redis' own CPU (INFO cpu: used_cpu_user + used_cpu_sys of the server process),
every command Redis ran (INFO commandstats, those inside scripts included) and the crawl's
`responses` counter (pages completed), and prints:

    procs  pages/s  Redis CPU share  Redis CPU µs/page  cmds/page  pages/s per Redis core

"Redis CPU share" is Redis CPU seconds / wall seconds: 1.00 is one core saturated. On a machine
with fewer cores than generators + 1, the generators and Redis share the cores, so pages/s here
is bounded by the generators; the machine-independent figure is Redis CPU per page, and one
Redis core sustains 1 / (CPU per page) pages/s.
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from crawlhub.processes.launcher import EmbeddedRedis  # noqa: E402
from crawlhub.sample_site import SampleSite  # noqa: E402
from crawls.engine.frontier import Frontier  # noqa: E402
from crawls.engine.request import VIA_REDIRECT, Outcome, Request  # noqa: E402

ORIGIN = "http://127.0.0.1:8080"
STATE_CHECK_SECONDS = 0.25  # as crawls/engine/slices.py
PUBLISH_EVERY_MS = 250  # as crawls/engine/live.py
LEASE_SECONDS = 60


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Site:
    """What the sample site answers for a URL, without serving it."""

    def __init__(self, pages: int) -> None:
        self.site = SampleSite(pages=pages)

    def outcome(self, request: Request) -> Outcome:
        path = urlsplit(request.url).path
        if path == "/":
            return self._page(request, 0)
        kind, _, number = path.strip("/").partition("/")
        n = int(number) if number.isdigit() else -1
        if kind == "p" and 0 < n < self.site.pages:
            return self._page(request, n)
        if kind == "moved" and self.site.is_moved(n):
            target = ORIGIN + self.site.path_for(self.site.moved_target(n))
            return Outcome(request, "done", status=301, links=[target], links_via=VIA_REDIRECT)
        if kind == "broken" and self.site.is_broken(n):
            return Outcome(request, "done", status=500, nbytes=200)
        return Outcome(request, "done", status=404, nbytes=200)

    def _page(self, request: Request, n: int) -> Outcome:
        links = list(dict.fromkeys(ORIGIN + path for path in self.site.links(n)))
        return Outcome(request, "done", status=200, nbytes=3500, links=links)


def generator(url: str, crawl_id: int, number: int, args, ready, start, stop) -> None:
    """One slice's traffic, until the parent sets stop."""
    client = redis.Redis.from_url(url)
    frontier = Frontier(crawl_id, client=client)
    site = Site(args.pages)
    slice_id = f"bench-{number}"
    held: list[Request] = []
    last_check = last_renew = 0.0
    ready.put(number)
    start.wait()
    while not stop.is_set():
        now = time.monotonic()
        if now - last_check >= STATE_CHECK_SECONDS:
            last_check = now
            frontier.state()
            frontier.slice_beat(slice_id)
            frontier.delayed_hosts()
        if now - last_renew >= LEASE_SECONDS / 3:
            last_renew = now
            frontier.renew(held, lease_seconds=LEASE_SECONDS)
        claimed = frontier.claim(args.claim, lease_seconds=LEASE_SECONDS)
        held += claimed
        if held and (len(held) >= args.flush or not claimed):
            frontier.complete([site.outcome(request) for request in held])
            held = []
            if frontier.publish_slot(PUBLISH_EVERY_MS):
                frontier.live_view(record=True)
        elif not claimed:
            time.sleep(0.1)  # the slice's EMPTY_CLAIM_BACKOFF
    frontier.release(held)
    client.close()


def sample(client: redis.Redis, frontier: Frontier) -> dict:
    cpu = client.info("cpu")
    commands = client.info("commandstats")
    return {
        "at": time.monotonic(),
        "cpu": cpu["used_cpu_user"] + cpu["used_cpu_sys"],
        "children": cpu["used_cpu_user_children"] + cpu["used_cpu_sys_children"],
        "calls": sum(entry["calls"] for entry in commands.values()),
        "usec": {name[8:]: entry["usec"] for name, entry in commands.items()},
        "pages": int(client.hget(frontier.key("stats"), "responses") or 0),
    }


def run(url: str, procs: int, crawl_id: int, args) -> dict:
    client = redis.Redis.from_url(url)
    client.flushall()
    frontier = Frontier(crawl_id, client=client)
    frontier.configure(max_pages=0, max_depth=-1, host_delay=0)
    frontier.set_state("running")
    frontier.add_seeds([ORIGIN + "/"])
    context = multiprocessing.get_context("spawn")
    ready, start, stop = context.Queue(), context.Event(), context.Event()
    workers = [
        context.Process(target=generator, args=(url, crawl_id, n, args, ready, start, stop))
        for n in range(procs)
    ]
    for worker in workers:
        worker.start()
    try:
        for _ in workers:  # each has imported crawlhub and connected: they start together
            ready.get(timeout=300)
        start.set()
        time.sleep(args.warmup)
        before = sample(client, frontier)
        time.sleep(args.seconds)
        after = sample(client, frontier)
    finally:
        stop.set()
        for worker in workers:
            worker.join(timeout=30)
            if worker.is_alive():
                worker.kill()
                worker.join()
    stats = frontier.stats()
    unfinished = stats["queued"] + stats["delayed"] + stats["in_flight"]
    exact = stats["requests"] == stats["responses"] + stats["errors"] + unfinished
    client.close()
    wall = after["at"] - before["at"]
    pages = after["pages"] - before["pages"]
    if pages <= 0:
        raise SystemExit(f"{procs} processes completed no page in {wall:.1f} s")
    cpu = after["cpu"] - before["cpu"]
    return {
        "procs": procs,
        "pages": pages,
        "wall": wall,
        "rate": pages / wall,
        "share": cpu / wall,
        "us_per_page": cpu / pages * 1e6,
        "children": after["children"] - before["children"],
        "calls": (after["calls"] - before["calls"]) / pages,
        "exact": exact,
        "usec": {
            name: (usec - before["usec"].get(name, 0)) / pages
            for name, usec in after["usec"].items()
        },
        "queued": stats["queued"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--seconds", type=float, default=10.0, help="measured window per run")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds before measuring")
    parser.add_argument("--runs", type=int, default=1, help="runs per process count")
    parser.add_argument("--pages", type=int, default=2_000_000, help="sample site size")
    parser.add_argument("--claim", type=int, default=32, help="requests per claim (threads)")
    parser.add_argument("--flush", type=int, default=100, help="outcomes per complete")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as folder,
        EmbeddedRedis(Path(folder), port=free_port()) as server,
    ):
        client = redis.Redis.from_url(server.url)
        info = client.info("server")
        persistence = client.config_get("appendonly") | client.config_get("appendfsync")
        print(
            f"redis-server {info['redis_version']} at {server.url}, {persistence}, "
            f"claims of {args.claim}, completions of {args.flush}, "
            f"{args.warmup:.0f} s warm-up + {args.seconds:.0f} s measured per run"
        )
        print(
            "procs    pages  pages/s  Redis CPU share  Redis CPU µs/page  cmds/page  "
            "pages/s per Redis core  counters"
        )
        results: dict[int, list[dict]] = {}
        crawl_id = 1
        for procs in args.procs:
            for _ in range(args.runs):
                row = run(server.url, procs, crawl_id, args)
                crawl_id += 1
                results.setdefault(procs, []).append(row)
                print(
                    f"{procs:5d} {row['pages']:8d} {row['rate']:8.0f} {row['share']:16.2f} "
                    f"{row['us_per_page']:18.1f} {row['calls']:10.1f} "
                    f"{1e6 / row['us_per_page']:23.0f}  "
                    f"{'exact' if row['exact'] else 'NOT EXACT'}"
                    + (f" (AOF rewrite: {row['children']:.2f} s CPU)" if row["children"] else ""),
                    flush=True,
                )
                top = sorted(row["usec"].items(), key=lambda item: -item[1])[:5]
                print(
                    "      time in commands (µs/page, wall: includes time preempted): "
                    + ", ".join(f"{n} {u:.1f}" for n, u in top)
                )
        everything = [row["us_per_page"] for rows in results.values() for row in rows]
        median = statistics.median(everything)
        print(
            f"median Redis CPU per page: {median:.1f} µs -> one Redis core sustains "
            f"~{1e6 / median:,.0f} pages/s (range {1e6 / max(everything):,.0f}-"
            f"{1e6 / min(everything):,.0f})"
        )
        client.close()


if __name__ == "__main__":
    main()
