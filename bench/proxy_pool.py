"""Proxy pool throughput: acquire + release pairs per second from several processes and threads.

Every run starts its own embedded Redis (fresh, on a unix socket unless --tcp) and its own data
dir; nothing else is touched:

    .venv/bin/python bench/proxy_pool.py          # 2 processes x 1, 2, 4, 8 threads, 3 runs of 10 s
    .venv/bin/python bench/proxy_pool.py --threads 1 --runs 1 --modes pair      # the plain figure
    .venv/bin/python bench/proxy_pool.py --processes 4 --threads 1,4 --channels 2 --tcp

Mode (a pair is always one acquire and one release, each with all its Lua checks):

- ``pair``: each thread loops pool.acquire() then pool.release() -- two scripts (EVALSHA), two
  round trips per pair. This is what crawls/engine/proxying.py does for each page under
  least_used and round_robin (a page's request, and each retry through another proxy).

Greedy crawls hold a fast proxy across pages instead (pool.keep(): one script per page, which
records the success and renews the lease), so they make fewer acquires.

Every thread of a process uses the process's one shared redis-py connection pool (so each thread
ends up with its own connection), as the crawl worker's fetch threads do. Processes and threads
contend for the same Lua scripts and keys on one channel (or spread over --channels).

Target (issue): >= 5,000 pairs/s from 2 processes on a 2-core machine (Redis shares the cores).
The "1 thread" line is the plain sequential figure (one caller per process, round-trip bound).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# --modes stays so that recorded command lines still run; "pair" is the one mode left.
MODES = ("pair",)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def worker(index, threads, channels, seconds, start, results) -> None:
    from crawlhub.redis.connections import reset_pools
    from proxies import pool

    reset_pools()  # never share a parent's sockets after fork
    counts = [(0, 0)] * threads
    ready = threading.Barrier(threads + 1)

    def loop(slot: int) -> None:
        channel = f"bench-{(index * threads + slot) % channels}"
        pairs = empty = 0
        ready.wait()
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            for _ in range(50):
                held = pool.acquire(channel=channel)
                if held is None:
                    empty += 1
                    continue
                pool.release(lease=held, latency_ms=120)
                pairs += 1
        counts[slot] = (pairs, empty)

    workers = [threading.Thread(target=loop, args=(slot,)) for slot in range(threads)]
    for t in workers:
        t.start()
    start.wait()
    began, cpu = time.perf_counter(), time.process_time()
    ready.wait()
    for t in workers:
        t.join()
    elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
    results.put((sum(c[0] for c in counts), sum(c[1] for c in counts), elapsed, cpu))


def redis_cpu(client) -> float:
    info = client.info("cpu")
    return info["used_cpu_sys"] + info["used_cpu_user"]


def one_run(args, threads: int) -> tuple[float, int, int, float, float, str]:
    """One fresh Redis, the pool seeded, `args.processes` x `threads` callers for args.seconds.
    Returns (pairs/s, pairs, empty acquires, client CPU s, Redis CPU s, Redis version)."""
    from crawlhub.processes.launcher import EmbeddedRedis
    from crawlhub.redis.connections import get_redis, reset_pools

    with tempfile.TemporaryDirectory(prefix="crawlhub-bench-") as tmp:
        server = EmbeddedRedis(Path(tmp) / "redis", port=free_port() if args.tcp else None)
        server.start()
        try:
            os.environ.update(REDIS_URL=server.url)
            from django.conf import settings

            settings.REDIS_URL = server.url
            reset_pools()
            from proxies import pool

            for i in range(args.proxies):
                proxy = f"http://10.{i // 65536}.{i // 256 % 256}.{i % 256}:3128"
                pool.record_check(proxy=proxy, url=proxy, ok=True, latency_ms=100 + i)
            version = get_redis().info("server")["redis_version"]
            reset_pools()
            monitor = redis.Redis.from_url(server.url)

            context = multiprocessing.get_context("fork")
            start, results = context.Event(), context.Queue()
            procs = [
                context.Process(
                    target=worker,
                    args=(i, threads, args.channels, args.seconds, start, results),
                )
                for i in range(args.processes)
            ]
            for p in procs:
                p.start()
            time.sleep(0.5)
            server_cpu = redis_cpu(monitor)
            start.set()
            outcomes = [results.get() for _ in procs]
            server_cpu = redis_cpu(monitor) - server_cpu
            monitor.close()
            for p in procs:
                p.join()
            health = pool.health()
            leased = sum(c["leased"] for c in health["channels"].values())
            if leased:
                print(f"    WARNING: {leased} proxies still leased after the run")
        finally:
            reset_pools()
            server.stop()
    pairs = sum(o[0] for o in outcomes)
    empty = sum(o[1] for o in outcomes)
    elapsed = max(o[2] for o in outcomes)
    return pairs / elapsed, pairs, empty, sum(o[3] for o in outcomes), server_cpu, version


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument(
        "--threads",
        default="1,2,4,8",
        help="threads per process, comma separated; 1 (the plain figure) is always run",
    )
    parser.add_argument("--modes", default="pair", help="pair (the one mode)")
    parser.add_argument("--runs", type=int, default=3, help="runs per configuration")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--proxies", type=int, default=200)
    parser.add_argument("--channels", type=int, default=1)
    parser.add_argument(
        "--tcp",
        action="store_true",
        help="Redis on a loopback TCP port instead of a unix socket (the embedded default).",
    )
    args = parser.parse_args()
    threads_list = sorted({1, *(int(t) for t in args.threads.split(","))})
    modes = [m.strip() for m in args.modes.split(",")]
    if any(m not in MODES for m in modes):
        parser.error(f"--modes: one or more of {MODES}")

    with tempfile.TemporaryDirectory(prefix="crawlhub-bench-data-") as data:
        os.environ.update(CRAWLHUB_DATA_DIR=data)
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crawlhub.settings")
        import django

        django.setup()
        print(
            f"proxy pool bench: {args.processes} processes, {args.proxies} proxies, "
            f"{args.channels} channel(s), {args.runs} run(s) x {args.seconds:g} s per line, "
            f"Redis on {'loopback TCP' if args.tcp else 'a unix socket'}, "
            f"{os.cpu_count()} CPUs; load {'/'.join(f'{x:.2f}' for x in os.getloadavg())}"
        )
        summary = []
        for mode in modes:
            for threads in threads_list:
                label = (
                    f"{mode:8s} {args.processes} processes x {threads} thread(s) "
                    f"({args.processes * threads} callers)"
                )
                rates, costs = [], []
                for run in range(1, args.runs + 1):
                    load = os.getloadavg()[0]
                    rate, pairs, empty, client_cpu, server_cpu, version = one_run(args, threads)
                    rates.append(rate)
                    # CPU per pair (clients + Redis) does not depend on what else the machine
                    # runs: it bounds the rate on idle cores (os.cpu_count() s of CPU per s).
                    cost = (client_cpu + server_cpu) / max(pairs, 1) * 1e6
                    costs.append(cost)
                    print(
                        f"  {label}, run {run}/{args.runs}: {pairs} pairs = {rate:,.0f} "
                        f"pairs/s; CPU per pair {cost:.0f} us (clients "
                        f"{client_cpu / max(pairs, 1) * 1e6:.0f} + Redis "
                        f"{server_cpu / max(pairs, 1) * 1e6:.0f}); empty acquires {empty}; "
                        f"load before {load:.2f}; Redis {version}",
                        flush=True,
                    )
                summary.append((label, rates, costs))
        print()
        print("summary (acquire+release pairs/s; target >= 5,000 from 2 processes):")
        for label, rates, costs in summary:
            median = statistics.median(rates)
            low, high = min(rates), max(rates)
            cost = statistics.median(costs)
            print(
                f"  {label}: median {median:,.0f} pairs/s, min {low:,.0f}, max {high:,.0f} "
                f"(spread {(high - low) / median * 100:.0f}% of the median); CPU per pair "
                f"{cost:.0f} us median = at most {os.cpu_count() * 1e6 / cost:,.0f} pairs/s "
                f"on {os.cpu_count()} idle CPUs"
            )
        print(f"load at the end: {'/'.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
