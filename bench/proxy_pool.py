"""Proxy pool throughput: acquire + release pairs per second from several processes.

Runs its own embedded Redis on a free port and its own data dir (nothing else is touched):

    .venv/bin/python bench/proxy_pool.py                      # 2 processes, 10 s, 200 proxies
    .venv/bin/python bench/proxy_pool.py --processes 4 --seconds 20 --channels 2

Every process loops pool.acquire(channel=...) then pool.release(lease=..., latency_ms=...) on
one shared channel (or spread over --channels), so they contend for the same Lua scripts and
keys as crawl slices do. Each pair is two script calls (EVALSHA) and two round trips. Target:
>= 5,000 pairs/s from 2 processes on a 2-core machine (Redis shares those cores).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def worker(index: int, channels: int, seconds: float, start, results) -> None:
    from crawlhub.connections import reset_pools
    from proxies import pool

    reset_pools()  # never share a parent's sockets after fork
    channel = f"bench-{index % channels}"
    pairs = empty = 0
    start.wait()
    deadline = time.perf_counter() + seconds
    began = time.perf_counter()
    while time.perf_counter() < deadline:
        for _ in range(100):
            lease = pool.acquire(channel=channel)
            if lease is None:
                empty += 1
                continue
            pool.release(lease=lease, latency_ms=120)
            pairs += 1
    results.put((pairs, empty, time.perf_counter() - began))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--proxies", type=int, default=200)
    parser.add_argument("--channels", type=int, default=1)
    parser.add_argument(
        "--tcp", action="store_true",
        help="Redis on a loopback TCP port instead of a unix socket (the embedded default).",
    )  # fmt: skip
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="crawlhub-bench-") as tmp:
        from crawlhub.launcher import EmbeddedRedis

        server = EmbeddedRedis(Path(tmp) / "redis", port=free_port() if args.tcp else None)
        server.start()
        try:
            os.environ.update(REDIS_URL=server.url, CRAWLHUB_DATA_DIR=str(Path(tmp) / "data"))
            os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crawlhub.settings")
            import django

            django.setup()
            from crawlhub.connections import get_redis, reset_pools
            from proxies import pool

            for i in range(args.proxies):
                proxy = f"http://10.{i // 65536}.{i // 256 % 256}.{i % 256}:3128"
                pool.record_check(proxy=proxy, url=proxy, ok=True, latency_ms=100 + i)
            redis_version = get_redis().info("server")["redis_version"]
            reset_pools()

            context = multiprocessing.get_context("fork")
            start, results = context.Event(), context.Queue()
            procs = [
                context.Process(
                    target=worker, args=(i, args.channels, args.seconds, start, results)
                )
                for i in range(args.processes)
            ]
            for p in procs:
                p.start()
            time.sleep(0.5)
            start.set()
            outcomes = [results.get() for _ in procs]
            for p in procs:
                p.join()
            pairs = sum(o[0] for o in outcomes)
            empty = sum(o[1] for o in outcomes)
            elapsed = max(o[2] for o in outcomes)
            health = pool.health()
        finally:
            server.stop()

    print(
        f"proxy pool: {args.processes} processes, {args.proxies} proxies, "
        f"{args.channels} channel(s), {args.seconds:g} s, Redis {redis_version} on "
        f"{'TCP' if args.tcp else 'a unix socket'}, "
        f"{os.cpu_count()} CPUs"
    )
    print(f"acquire+release pairs: {pairs} in {elapsed:.2f} s = {pairs / elapsed:,.0f} pairs/s")
    print(f"empty acquires: {empty}; leased at the end: "
          f"{sum(c['leased'] for c in health['channels'].values())}")  # fmt: skip


if __name__ == "__main__":
    main()
