"""A real crawl of a generated site of a million pages, end to end, checked URL by URL.

    .venv/bin/python bench/million_pages.py                      # 1,000,000 pages (~1.06M URLs)
    .venv/bin/python bench/million_pages.py --pages 20000        # the same, in a minute or two

The site is crawl_bench.py's (SampleSite written as static files, served by Debian's nginx with
an access log) and crawlhub crawls it as crawl_bench.py and speed_guard.py run it:
`manage.py up --workers 2`, 32 threads x 2 slices, no robots.txt, no retries, a fresh SQLite
database and embedded Redis, the queue's window on (CRAWLHUB_FRONTIER_WINDOW, the product's
100,000 unless --window says otherwise), so most of what is discovered waits in the database.

Prints, as the crawl goes, pages/s over each 100,000 URLs nginx answered (its access log read
once a second: one line a request), the database's size then and the load average; at the end
Redis' peak memory (INFO memory used_memory_peak), the database's size, the crawl's counters
(the frontier's invariant, nothing left spilled) and speed_guard.py's check of nginx's log:
every URL of SampleSite.expected() asked exactly once, nothing else asked. See bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import redis

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from crawl_bench import run_crawlhub, say, start_nginx  # noqa: E402
from speed_guard import log_check  # noqa: E402

from crawlhub.processes.launcher import stop_process  # noqa: E402
from crawlhub.sample_site import SampleSite  # noqa: E402
from crawls.engine.frontier import Frontier  # noqa: E402

MB = 1024 * 1024


def database_bytes(data: Path) -> int:
    """The SQLite database's files (main, WAL, shared memory) in a crawlhub data folder."""
    return sum(path.stat().st_size for path in data.glob("*.sqlite3*") if path.is_file())


@dataclass
class Mark:
    urls: int  # requests nginx had answered
    at: float  # time.monotonic()
    load: float
    database: int  # bytes


class LogRate(threading.Thread):
    """Reads nginx's access log once a second and notes when every `every` URLs were
    answered, with the database's size at that moment."""

    def __init__(self, log: Path, offset: int, data: Path, every: int) -> None:
        super().__init__(daemon=True)
        self.log, self.offset, self.data, self.every = log, offset, data, every
        self.marks: list[Mark] = []
        self._done = threading.Event()

    def run(self) -> None:
        urls, position, started = 0, self.offset, None
        while not self._done.wait(1.0):
            if not self.log.exists():
                continue
            with open(self.log, "rb") as lines:
                lines.seek(position)
                text = lines.read()
            text = text[: text.rfind(b"\n") + 1]  # a line nginx is still writing waits
            position += len(text)
            urls += text.count(b"\n")
            now = time.monotonic()
            if started is None and urls:
                started = now
                self.marks.append(Mark(0, now, os.getloadavg()[0], database_bytes(self.data)))
            while self.marks and urls >= self.marks[-1].urls + self.every:
                mark = Mark(self.marks[-1].urls + self.every, now, os.getloadavg()[0], 0)
                mark.database = database_bytes(self.data)
                self.marks.append(mark)
                before = self.marks[-2]
                say(
                    f"{mark.urls:>9,} URLs: {self.every / (now - before.at):6.0f} pages/s over "
                    f"the last {self.every:,}, database {mark.database / MB:,.0f} MB, "
                    f"load {mark.load:.1f}"
                )

    def stop(self) -> None:
        self._done.set()
        self.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=1_000_000)
    parser.add_argument(
        "--window", type=int, help="CRAWLHUB_FRONTIER_WINDOW (default: the product's)"
    )
    parser.add_argument("--every", type=int, default=100_000, help="URLs between rate readings")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=32, help="fetches per slice")
    parser.add_argument("--slices", type=int, default=2)
    parser.add_argument("--timeout", type=int, default=7200, help="seconds for the crawl")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, site, DB)")
    parser.add_argument(
        "--site",
        type=Path,
        help="the folder of an earlier run with --keep: its site is served again as written "
        "(on its port), not written anew (a million pages take 10-20 minutes to write)",
    )
    args = parser.parse_args()
    args.rules = False  # run_crawlhub's switch for extraction rules (crawl_bench.py --rules)
    if args.window:
        os.environ["CRAWLHUB_FRONTIER_WINDOW"] = str(args.window)

    site = SampleSite(pages=args.pages, seed=args.seed)
    started = time.monotonic()
    expected = site.expected()
    say(f"{len(expected):,} URLs expected ({time.monotonic() - started:.0f} s)")
    port = None
    if args.site:
        folder = args.site.resolve()
        port = int(re.search(r"listen 127\.0\.0\.1:(\d+);", (folder / "nginx.conf").read_text())[1])
        for old in ("access.log", "crawlhub", "redis-crawlhub"):
            subprocess.run(["rm", "-rf", str(folder / old)], check=True)
        say(f"serving the {args.pages:,}-page site written in {folder} (port {port})")
    else:
        folder = Path(tempfile.mkdtemp(prefix=f"million-pages-{args.pages}-"))
        say(f"writing a {args.pages:,}-page site to {folder}")
    access = folder / "access.log"
    started = time.monotonic()
    nginx, origin = start_nginx(site, folder, access_log=access, port=port)
    say(f"site written and served at {origin} ({time.monotonic() - started:.0f} s)")
    time.sleep(0.5)  # nginx logs its start-up check's request just after answering it
    offset = access.stat().st_size if access.exists() else 0
    rate = LogRate(access, offset, folder / "crawlhub", args.every)
    seen: dict = {}

    def ended(client: redis.Redis, data: Path) -> None:
        seen["memory"] = client.info("memory")
        seen["database"] = database_bytes(data)
        crawl = next(client.scan_iter(match="ch:{c*}:stats", count=1000)).decode()
        seen["stats"] = Frontier(int(crawl.split("{c")[1].split("}")[0]), client=client).stats()

    try:
        rate.start()
        result = run_crawlhub(site, origin, folder, args, expected=expected, ended=ended)
        rate.stop()
        say("checking nginx's log URL by URL")
        check, _ = log_check(access, offset, expected)
    finally:
        stop_process(nginx)
        if not args.keep:
            subprocess.run(["rm", "-rf", str(folder)], check=False)
    report(args, result, rate.marks, seen, check, len(expected))


def report(args, result, marks: list[Mark], seen: dict, check: str, expected: int) -> None:
    stats, memory = seen["stats"], seen["memory"]
    print(f"\n== {args.pages:,}-page site, {expected:,} URLs, crawled by crawlhub")
    print(f"{'URLs':>11}{'pages/s':>9}{'DB MB':>8}{'load':>6}")
    rates = []
    for before, mark in zip(marks, marks[1:], strict=False):
        rates.append((mark.urls - before.urls) / (mark.at - before.at))
        print(f"{mark.urls:>11,}{rates[-1]:>9.0f}{mark.database / MB:>8,.0f}{mark.load:>6.1f}")
    print(
        f"crawl                 {result.urls:,} URLs in {result.seconds:,.0f} s "
        f"({result.rate:,.0f} pages/s)"
    )
    if len(rates) >= 2:
        print(
            f"first / last {args.every:,}  {rates[0]:,.0f} / {rates[-1]:,.0f} pages/s "
            f"({100 * (rates[-1] / rates[0] - 1):+.1f} %)"
        )
    print(
        f"Redis                 peak {int(memory['used_memory_peak']) / MB:,.1f} MB "
        f"(used_memory_peak), {int(memory['used_memory']) / MB:,.1f} MB at the end"
    )
    print(f"database              {seen['database'] / MB:,.0f} MB at the end (SQLite, WAL)")
    parts = ("responses", "errors", "queued", "delayed", "in_flight", "cancelled", "spilled")
    total = sum(stats[name] for name in parts)
    print(
        f"counters              requests {stats['requests']:,} = "
        + " + ".join(f"{name} {stats[name]:,}" for name in parts)
        + (" (exact)" if total == stats["requests"] else f" MISMATCH: the sum is {total:,}")
    )
    print(f"check                 {check or 'ok: every expected URL asked once, nothing else'}")
    print(f"crawlhub's own        {result.note}")


if __name__ == "__main__":
    main()
