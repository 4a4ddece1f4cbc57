"""Redis memory per URL of a crawl's dedup sets, and Redis commands per fetched page.

Runs its own embedded Redis on a free port (nothing else is touched) and prints figures:

    .venv/bin/python bench/frontier_memory.py            # 1,000,000 URLs
    .venv/bin/python bench/frontier_memory.py --urls 200000 --skip-seeds

1. A simulated crawl of N pages (page i links to pages 10i+1..10i+10 and back home) through
   claim() and complete(), until the frontier is done: every URL is fingerprinted once, the queue
   ends empty, so the used_memory delta is the dedup sets (plus a few fixed keys).
2. N seeds through add_seeds(): memory with every request still queued.
3. N links found on N/10 pages (10 each, on the page's host, its URL their referrer), through
   claim() and complete(): memory with every link still queued, as a crawl's queue holds most.

To compare with another checkout, run this file with that checkout's code:
`cp bench/frontier_memory.py /tmp/base/bench/ && /tmp/base/.venv/bin/python /tmp/base/bench/...`.
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import time
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from crawlhub.processes.launcher import EmbeddedRedis  # noqa: E402
from crawls.engine.frontier import Frontier  # noqa: E402
from crawls.engine.frontier_scripts import SEEN_BUCKET_BITS  # noqa: E402
from crawls.engine.request import Outcome  # noqa: E402

FANOUT = 10


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def url(i: int) -> str:
    return f"http://h{i % 100}.example.com/p/{i}"


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def memory_usage(client: redis.Redis, pattern: str) -> tuple[int, list[int], set[bytes]]:
    """Total MEMORY USAGE (exact, SAMPLES 0), sizes and encodings of the keys matching pattern."""
    total, sizes, encodings = 0, [], set()
    for key in client.scan_iter(match=pattern, count=1000):
        total += client.memory_usage(key, samples=0)
        sizes.append(client.scard(key))
        encodings.add(client.object("encoding", key))
    return total, sizes, encodings


def call_counts(client: redis.Redis) -> tuple[int, int]:
    """(script calls sent by the client, every command including those run inside scripts)."""
    stats = client.info("commandstats")
    scripts = sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("evalsha", "eval"))
    return scripts, sum(entry["calls"] for entry in stats.values())


def crawl(client: redis.Redis, pages: int, batch: int) -> None:
    frontier = Frontier(1, client=client)
    frontier.configure(max_pages=0, max_depth=-1, host_delay=0)
    frontier.set_state("running")
    client.config_resetstat()
    before = used_memory(client)
    started = time.perf_counter()
    frontier.add_seeds([url(0)])
    fetched = 0
    while claimed := frontier.claim(batch, lease_seconds=300):
        outcomes = []
        for request in claimed:
            i = int(request.url.rsplit("/", 1)[1])
            links = [url(j) for j in range(FANOUT * i + 1, FANOUT * i + FANOUT + 1) if j < pages]
            links.append(url(0))  # home again: a repeat on every page
            outcomes.append(Outcome(request, "done", status=200, nbytes=1000, links=links))
        frontier.complete(outcomes)
        fetched += len(claimed)
    elapsed = time.perf_counter() - started
    scripts, commands = call_counts(client)
    delta = used_memory(client) - before
    seen, sizes, encodings = memory_usage(client, frontier.key("seen:*"))
    stats = frontier.stats()
    assert frontier.is_done() and stats["requests"] == pages == fetched, stats

    print(f"== Crawl of {fetched:,} pages, batches of {batch}, {FANOUT} new links + 1 repeat each")
    print(f"time                          {elapsed:8.1f} s  ({fetched / elapsed:,.0f} pages/s)")
    print(f"used_memory delta / URL       {delta / pages:8.2f} bytes")
    print(f"MEMORY USAGE seen:* / URL     {seen / pages:8.2f} bytes")
    print(
        f"seen buckets                  {len(sizes)} of {2**SEEN_BUCKET_BITS}, "
        f"{min(sizes)}..{max(sizes)} fingerprints each (mean {pages / len(sizes):.0f}), "
        f"encodings {sorted(e.decode() for e in encodings)}"
    )
    print(f"script calls per page         {scripts / fetched:8.3f}  (EVALSHA/EVAL round trips)")
    print(f"all commands per page         {commands / fetched:8.2f}  (incl. those inside scripts)")
    print(f"counters                      {stats}")
    frontier.delete()


def seeds(client: redis.Redis, count: int, chunk: int = 10_000) -> None:
    frontier = Frontier(2, client=client)
    before = used_memory(client)
    started = time.perf_counter()
    for start in range(0, count, chunk):
        frontier.add_seeds([url(i) for i in range(start, min(start + chunk, count))])
    elapsed = time.perf_counter() - started
    delta = used_memory(client) - before
    seen, _, _ = memory_usage(client, frontier.key("seen:*"))
    queue = client.memory_usage(frontier.key("queue"), samples=0)
    print(f"\n== {count:,} seeds through add_seeds, all still queued")
    print(f"time                          {elapsed:8.1f} s  ({count / elapsed:,.0f} URLs/s)")
    print(f"used_memory delta / URL       {delta / count:8.2f} bytes (dedup + queued request)")
    print(f"MEMORY USAGE seen:* / URL     {seen / count:8.2f} bytes")
    print(f"MEMORY USAGE queue / URL      {queue / count:8.2f} bytes")
    frontier.delete()


def queued_links(client: redis.Redis, count: int, chunk: int = 500) -> None:
    frontier = Frontier(3, client=client)
    frontier.configure(max_pages=0, max_depth=-1, host_delay=0)
    frontier.set_state("running")
    pages = count // FANOUT
    frontier.add_seeds([url(i) for i in range(pages)])
    claimed = []
    while more := frontier.claim(chunk, lease_seconds=600):
        claimed += more
    before = used_memory(client)
    started = time.perf_counter()
    for start in range(0, pages, chunk):
        outcomes = []
        for request in claimed[start : start + chunk]:
            links = [f"{request.url}/{k}" for k in range(FANOUT)]
            outcomes.append(Outcome(request, "done", status=200, nbytes=1000, links=links))
        frontier.complete(outcomes)
    elapsed = time.perf_counter() - started
    delta = used_memory(client) - before
    queue = client.memory_usage(frontier.key("queue"), samples=0)
    queued = frontier.stats()["queued"]
    assert queued == pages * FANOUT, queued
    print(f"\n== {queued:,} links of {pages:,} pages through complete, all still queued")
    print(f"time                          {elapsed:8.1f} s  ({queued / elapsed:,.0f} links/s)")
    print(f"used_memory delta / URL       {delta / queued:8.2f} bytes (dedup + queued request)")
    print(f"MEMORY USAGE queue / URL      {queue / queued:8.2f} bytes")
    [member] = client.zrange(frontier.key("queue"), 0, 0)
    print(f"a queued link                 {len(member)} bytes: {member!r}")
    frontier.delete()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=500, help="claim/complete batch size")
    parser.add_argument("--skip-seeds", action="store_true", help="only run the crawl")
    options = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as folder,
        EmbeddedRedis(Path(folder), port=free_port()) as server,
    ):
        client = redis.Redis.from_url(server.url)
        client.config_set("appendonly", "no")  # a benchmark, not a crawl to keep
        info = client.info("server")
        print(f"Redis {info['redis_version']}, {client.config_get('set-max-intset-entries')}")
        crawl(client, options.urls, options.batch)
        if not options.skip_seeds:
            seeds(client, options.urls)
            queued_links(client, options.urls)
        client.close()


if __name__ == "__main__":
    main()
