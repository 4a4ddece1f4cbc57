"""Exports of a big crawl: peak memory and rows per second of JSONL and CSV, at 10k to 1M rows.

    .venv/bin/python bench/export_memory.py                       # 10,000, 100,000, 1,000,000
    .venv/bin/python bench/export_memory.py --rows 10000 100000

Everything in a temp dir: a SQLite database (never DATABASE_URL's), one crawl whose page
rows are written with the slices' bulk insert (crawls/rows.py) up to each size in turn. Each
export is `manage.py crawl export ID --format F --output FILE` run by call_command in a fresh
child process; its peak RSS (ru_maxrss from wait4) is what the whole process held at its
highest, Django included, so a child that only sets Django up is measured too (the baseline).
Rows/s is the rows over the export's own time, from the child's clock (startup excluded).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FORMATS = ("jsonl", "csv")
BATCH = 5000


def setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crawlhub.settings")
    import django

    django.setup()


def child(crawl_id: int, fmt: str, output: str) -> None:
    """One export in this process; prints its time and size as JSON. fmt "none": setup only."""
    setup_django()
    from django.core.management import call_command

    from crawls import exports  # noqa: F401 - the baseline imports what an export imports

    seconds = size = 0.0
    if fmt != "none":
        started = time.perf_counter()
        call_command(
            "crawl",
            "export",
            str(crawl_id),
            "--format",
            fmt,
            "--output",
            output,
            stdout=io.StringIO(),
        )
        seconds = time.perf_counter() - started
        size = os.path.getsize(output)
        os.unlink(output)
    print(json.dumps({"seconds": seconds, "bytes": size}))


def measure(crawl_id: int, fmt: str, tmp: Path) -> tuple[float, int, int]:
    """(export seconds, bytes written, peak RSS in bytes) of one child process."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", str(crawl_id), fmt, str(tmp / f"out.{fmt}")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
    )
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"the {fmt} export of crawl {crawl_id} exited {proc.returncode}")
    result = json.loads(out.splitlines()[-1])
    return result["seconds"], int(result["bytes"]), usage.ru_maxrss * 1024  # Linux: KiB


def add_pages(crawl, first: int, last: int) -> None:
    """Pages first .. last-1, shaped like the export tests' pages, as slices write them."""
    from django.utils import timezone

    from crawls.engine.rows import PAGE_ROWS
    from crawls.models import Page

    start = timezone.now() - timedelta(hours=1)
    for offset in range(first, last, BATCH):
        PAGE_ROWS.write(
            [
                PAGE_ROWS.row(
                    Page(
                        crawl=crawl,
                        url=f"http://127.0.0.1:9/page/{n}?q={n}",
                        final_url="",
                        status=200 if n % 10 else 404,
                        content_type="text/html",
                        bytes=1000 + n,
                        elapsed_ms=n % 500,
                        depth=n % 5,
                        referrer="http://127.0.0.1:9/",
                        fetched_at=start + timedelta(milliseconds=n),
                        url_hash=f"{n:040d}",
                        title=f'Page {n}, with a comma and "quotes" — ' + "x" * 60,
                        redirects=["http://127.0.0.1:9/old"] if n % 7 == 0 else [],
                    )
                )
                for n in range(offset, min(offset + BATCH, last))
            ]
        )


def main(args) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="crawlhub-export-bench-"))
    os.environ["CRAWLHUB_DATA_DIR"] = str(tmp)
    os.environ["DATABASE_URL"] = f"sqlite:///{tmp}/bench.sqlite3"
    os.environ["LOG_LEVEL"] = "WARNING"
    setup_django()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from crawls import services

    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user("bench")
    crawl = services.crawl_create(
        user=user, name="export bench", seeds=["http://127.0.0.1:9/"], obey_robots=False
    )
    _, _, baseline = measure(crawl.pk, "none", tmp)
    print(f"SQLite database in {tmp}")
    print(f"baseline (Django set up, no export): peak RSS {baseline / 2**20:.1f} MiB\n")
    print(
        f"{'rows':>9}  {'format':6}  {'MB out':>7}  {'seconds':>7}  {'rows/s':>8}  "
        f"{'peak RSS':>9}  {'over baseline':>13}"
    )
    have = 0
    for rows in sorted(args.rows):
        started = time.perf_counter()
        add_pages(crawl, have, rows)
        inserted = (rows - have) / (time.perf_counter() - started)
        have = rows
        print(f"{rows:>9,}  (rows written at {inserted:,.0f}/s)")
        for fmt in FORMATS:
            seconds, size, peak = measure(crawl.pk, fmt, tmp)
            print(
                f"{rows:>9,}  {fmt:6}  {size / 1e6:>7.1f}  {seconds:>7.2f}  "
                f"{rows / seconds:>8,.0f}  {peak / 2**20:>5.1f} MiB  "
                f"{(peak - baseline) / 2**20:>9.1f} MiB"
            )
    if not args.keep:
        import shutil

        from django.db import connections

        connections.close_all()
        shutil.rmtree(tmp)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        child(int(sys.argv[2]), sys.argv[3], sys.argv[4])
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--rows",
        type=int,
        nargs="+",
        default=[10_000, 100_000, 1_000_000],
        help="crawl sizes to export, smallest first (rows are added between sizes)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp dir")
    main(parser.parse_args())
