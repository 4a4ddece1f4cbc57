"""A worker's peak memory while a site sends gigabytes: a 2 GB stream, a gzip bomb and a deflate
bomb (each decoding to 2 GB), fetched by a crawl with keep_bodies on and the largest max_bytes.

    .venv/bin/python bench/worker_memory.py
    .venv/bin/python bench/worker_memory.py --database-url postgres://user:pw@127.0.0.1/db

Everything in a temp dir: an embedded Redis, a SQLite database (or --database-url's, which
must be empty or crawlhub's), and local servers that make their bodies while sending them.
Each crawl has one page and runs its slices in a child process of its own
(tests/support/slice_process.py), as a worker's job process does; its peak RSS is the child's
VmHWM: Python, Django and the crawl engine included. The first line is a crawl of a 1 KB page,
for what the process takes before any big body. The test that keeps the peak under 300 MB:
tests/end_to_end/test_worker_memory.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MB = 1024 * 1024
GB = 1024 * MB
CASES = [
    ("1 KB page (baseline)", 1024, ""),
    ("2 GB stream", 2 * GB, ""),
    ("gzip bomb, 2 GB decoded", 2 * GB, "gzip"),
    ("deflate bomb, 2 GB decoded", 2 * GB, "deflate"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default="", help="default: SQLite in the temp dir")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="worker-memory-") as tmp:
        os.environ["CRAWLHUB_DATA_DIR"] = tmp
        os.environ.pop("DATABASE_URL", None)
        if args.database_url:
            os.environ["DATABASE_URL"] = args.database_url
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crawlhub.settings")
        import django

        django.setup()
        run(Path(tmp))


def run(tmp: Path) -> None:
    from django.core.management import call_command
    from django.db import connection

    from crawlhub.processes import launcher
    from crawls import services
    from crawls.models import MAX_BODY_BYTES
    from tests.support import slice_process
    from tests.support.crawling import use_redis
    from tests.support.sites import RawServer, free_port, streaming

    redis = launcher.EmbeddedRedis(tmp / "redis", port=free_port())
    redis.start(timeout=60)
    try:
        use_redis(redis.url)
        call_command("migrate", verbosity=0)
        print(f"max_bytes {MAX_BODY_BYTES / MB:.0f} MB, keep_bodies on, {connection.vendor}")
        print(f"{'case':28} {'peak RSS':>9} {'kept body':>10}")
        for name, size, encoding in CASES:
            with RawServer(streaming(size, content_encoding=encoding), lifetime=120) as server:
                crawl = services.crawl_create(
                    user=None,
                    name=name,
                    seeds=[server.url + "/"],
                    keep_bodies=True,
                    max_bytes=MAX_BODY_BYTES,
                    threads=1,
                    max_retries=0,
                    obey_robots=False,
                    timeout=10,
                )
                services.crawl_start(crawl=crawl)
                measured = slice_process.peak_rss(crawl.pk, env=dict(os.environ))
            page = crawl.pages.get()
            kept = len(page.body or b"")
            print(f"{name:28} {measured['peak_rss'] / MB:6.0f} MB {kept / MB:7.1f} MB")
    finally:
        redis.stop()


if __name__ == "__main__":
    main()
