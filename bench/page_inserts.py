"""What the text search's index costs the slices' page inserts: rows/s with and without it.

    .venv/bin/python bench/page_inserts.py                    # SQLite
    .venv/bin/python bench/page_inserts.py --postgres postgres://u:pw@127.0.0.1:5432/crawlhub_ins

Pages as bench/pages_browser.py makes them, written as a worker writes them (crawls.engine.rows
.PAGE_ROWS, one transaction per batch of --batch rows) into a crawl that already holds
--existing pages. Rounds alternate: with the index (SQLite: the FTS5 table, fed a batch at a
time by PAGE_ROWS since migration 0017, by a trigger per row before; PostgreSQL: the pg_trgm
GIN indexes), then without it (SQLite: the same rows through a plain BulkInsert, which does not
feed it, and its triggers dropped; PostgreSQL: the indexes dropped; made again after the
round), so that a machine's drift hits both alike; the ratio is taken round by round.
Each backend runs in a child process on a fresh database of its own (dropped at the end).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))
sys.path.insert(0, str(ROOT))


def text_index(connection) -> list[tuple[str, str]]:
    """(name, CREATE statement) of the text search's triggers (SQLite) or indexes (PostgreSQL)."""
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE indexname LIKE 'page_%_trgm'"
            )
        else:
            cur.execute(
                "SELECT name, sql FROM sqlite_master "
                "WHERE type = 'trigger' AND tbl_name = 'crawls_page'"
            )
        return cur.fetchall()


def child(args) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crawlhub.settings")
    import django

    django.setup()
    import pages_browser
    from django.db import connection

    from crawls.engine.rows import PAGE_ROWS, BulkInsert
    from crawls.models import Page

    crawl = pages_browser.setup(args.existing, 0)
    made = text_index(connection)
    assert made, "no text index: is migration 0014_page_text_search applied?"
    shape = pages_browser.row_template(crawl.pk)
    total = args.existing + args.rounds * 2 * args.rows
    first = args.existing
    print(
        f"{connection.vendor}: {args.rows:,} rows a round in batches of {args.batch}, "
        f"into a crawl of {args.existing:,}+"
    )
    rates = {"with": [], "without": []}
    for round_ in range(args.rounds):
        for kind in ("with", "without"):
            rows = pages_browser.make_rows(shape, 7, total, first, first + args.rows)
            first += args.rows
            if kind == "without":
                with connection.cursor() as cur:
                    for name, _ in made:
                        word = "INDEX" if connection.vendor == "postgresql" else "TRIGGER"
                        cur.execute(f"DROP {word} {name}")
            # PAGE_ROWS feeds SQLite's index itself (crawls.engine.rows.PageInsert).
            writer = BulkInsert(Page) if kind == "without" else PAGE_ROWS
            started = time.perf_counter()
            for i in range(0, len(rows), args.batch):
                writer.write(rows[i : i + args.batch])
            rates[kind].append(len(rows) / (time.perf_counter() - started))
            if kind == "without":
                with connection.cursor() as cur:
                    if connection.vendor == "sqlite":  # what was written meanwhile, indexed
                        cur.execute(
                            "INSERT INTO crawls_page_text(crawls_page_text) VALUES ('rebuild')"
                        )
                    for _, create in made:
                        cur.execute(create)
        print(
            f"round {round_ + 1}: with {rates['with'][-1]:,.0f} rows/s, "
            f"without {rates['without'][-1]:,.0f} rows/s"
        )
    ratios = [w / wo for w, wo in zip(rates["with"], rates["without"], strict=True)]
    print(
        f"median: with the index {statistics.median(rates['with']):,.0f} rows/s, without "
        f"{statistics.median(rates['without']):,.0f} rows/s; with/without "
        f"{statistics.median(ratios):.2f} "
        f"(min {min(ratios):.2f}, max {max(ratios):.2f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=20_000, help="rows written a round")
    parser.add_argument("--batch", type=int, default=100, help="rows a transaction")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--existing", type=int, default=100_000, help="pages there before")
    parser.add_argument("--postgres", default="", help="PostgreSQL, in this new database")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    argv = [
        sys.executable,
        __file__,
        "--child",
        "--rows",
        str(args.rows),
        "--batch",
        str(args.batch),
        "--rounds",
        str(args.rounds),
        "--existing",
        str(args.existing),
    ]
    tmp = Path(tempfile.mkdtemp(prefix="crawlhub-inserts-bench-"))
    env = {**os.environ, "LOG_LEVEL": "WARNING", "CRAWLHUB_DATA_DIR": str(tmp)}
    try:
        if not args.postgres:
            env["DATABASE_URL"] = f"sqlite:///{tmp}/bench.sqlite3"
            subprocess.run(argv, env=env, cwd=ROOT.parent, check=True)
            return
        import psycopg
        from psycopg import sql

        parts = urlsplit(args.postgres)
        name = parts.path.lstrip("/")
        admin = urlunsplit(parts._replace(path="/postgres"))
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        try:
            env["DATABASE_URL"] = args.postgres
            subprocess.run(argv, env=env, cwd=ROOT.parent, check=True)
        finally:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier(name)))
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
