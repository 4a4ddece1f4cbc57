"""The pages browser on a crawl of 1,000,000 pages: p50 / p95 of filtered, sorted screens.

    .venv/bin/python bench/pages_browser.py                      # SQLite, 1,000,000 pages
    .venv/bin/python bench/pages_browser.py --postgres postgres://u:pw@127.0.0.1:5432/crawlhub_bench
    .venv/bin/python bench/pages_browser.py --pages 100000 --runs 10 --only postgres --postgres ...
    .venv/bin/python bench/pages_browser.py --only postgres --reuse --postgres ...  # kept by --keep

Each database is a fresh one of its own: SQLite in a temp dir (`CRAWLHUB_DATA_DIR` and
`DATABASE_URL` point there), and with --postgres the database that URL names, which this script
creates (it must not exist) and drops at the end (--keep keeps both; --reuse measures such a
kept database again, without building it). Migrations, then two
crawls: another one with a fifth as many pages, written first (its ids come before, as an older
crawl's would), and the measured one with --pages rows. Rows are made as a crawl's pages look (a
few dozen sites, URLs of 50-150 characters, ~90 % 200s, ~1 % without a response, HTML mostly,
some PDFs, images and JSON, change against a baseline, a price extracted from product pages)
and written with the slices' bulk insert (crawls.engine.rows.PAGE_ROWS) on SQLite and COPY on
PostgreSQL, with the secondary indexes (and on SQLite the text index's triggers) dropped for the
load and made again after it from their own CREATE statements (the FTS5 table rebuilt).
PostgreSQL is then VACUUM ANALYZEd, as autovacuum would; SQLite is left without ANALYZE, as
crawlhub leaves it.

Each request is `page_slice(crawl, PageFilter.from_params(params), after=..., before=...)`, what
the view calls (crawls/pages.py: its rows and its bounded count), timed after one warm-up call,
--runs times or for 20 s (at least 5 runs), whichever ends first. Then the plans of a few
requests and of every one over 500 ms p95, each query with the time of one run. Each backend
runs in a child process of its own (Django's settings are read once).
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import itertools
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BATCH = 10_000
START = datetime(2025, 3, 1, 10, 0, tzinfo=UTC)
BUDGET_S = 20.0  # a slow request stops after this long (at least MIN_RUNS runs)
MIN_RUNS = 5
SLOW_MS = 500.0  # requests whose p95 is over this get their plans printed
RARE = "unicorn"  # in the titles of RARE_ROWS pages only: a search that scans everything
RARE_ROWS = 3

WORDS = """
about account action advanced annual apple archive article audio autumn basic beach best bike
black blue board book boots brand bridge budget build cable camera camp care career cart case
castle center chair chart cheap city classic clean climate cloud coffee color compact cook
cotton country craft daily data deal deep design desk digital dinner direct dress drive early
eco edition energy event express family farm fast field film final fitness flat floor flower
food forest fresh front full games garden gift glass global gold green guide hand health heavy
home hotel house indoor island jacket kids kitchen lamp large leather light linen local long
luxury market metal mini modern mountain music natural news night office online open orange
organic outdoor paper park party photo plant plus pocket power premium print pro quick quiet
rain record red review river road room round royal running safe sale salt school sea season
secret select shirt shoe silver simple sleep slim small smart soft solar sound sport spring
square star steel stone store street studio style summer sun super table team tech travel tree
trip ultra urban value video vintage wall warm water white wild winter wood world yellow
""".split()  # noqa: SIM905 - a list of words reads better as text
# (section, weight, content type)
KINDS = [
    ("products", 30, "text/html; charset=utf-8"),
    ("blog", 15, "text/html; charset=utf-8"),
    ("docs", 15, "text/html; charset=utf-8"),
    ("news", 10, "text/html; charset=utf-8"),
    ("category", 10, "text/html; charset=utf-8"),
    ("help", 5, "text/html; charset=utf-8"),
    ("files", 5, "application/pdf"),
    ("images", 5, "image/png"),
    ("api", 5, "application/json"),
]
MEAN_LOG_BYTES = {"application/pdf": 13, "image/png": 11.5, "application/json": 8}
STATUSES = [(200, 900), (301, 35), (302, 5), (404, 30), (403, 5), (500, 10), (503, 5), (None, 10)]
CHANGES = [("unchanged", 60), ("new", 18), ("changed", 12), ("", 10)]
DEPTHS = [
    (0, 0.1),
    (1, 3),
    (2, 8),
    (3, 14),
    (4, 17),
    (5, 16),
    (6, 13),
    (7, 10),
    (8, 8),
    (9, 6),
    (10, 5),
]
ERRORS = ["Timed out after 30 s", "Connection refused", "TLS handshake failed", "DNS lookup failed"]
SITES = [  # (host, name in titles)
    (f"{prefix}{name}.{tld}", name.replace("-", " ").title())
    for prefix, name, tld in zip(
        ["www.", "", "shop.", "blog.", "docs.", "www."] * 6,
        """
        northwind contoso fabrikam acme globex initech umbrella hooli stark wayne wonka tyrell
        cyberdyne soylent oscorp vandelay gringotts dunder aperture blackmesa monarch pied-piper
        bluth prestige nakatomi duff krusty sirius weyland massive
        """.split(),  # noqa: SIM905
        ["com", "org", "net", "co.uk", "de", "io"] * 5,
        strict=False,
    )
]


# -- the rows -----------------------------------------------------------------------------------


def _picker(weighted: list[tuple]):
    """A function of a random.Random that picks one of `weighted` by its weight (item[1])."""
    cumulative = list(itertools.accumulate(w[1] for w in weighted))
    total = cumulative[-1]
    return lambda rng: weighted[bisect.bisect(cumulative, rng.random() * total)]


pick_kind, pick_status, pick_change, pick_depth = map(_picker, (KINDS, STATUSES, CHANGES, DEPTHS))


def row_template(crawl_id: int) -> tuple[list, dict[str, int], bool]:
    """A page row with every field's default, as the database takes it; where each column is
    in it; whether datetimes go as text. JSON as text: SQLite keeps it so, COPY reads it as
    jsonb."""
    from django.db import connection

    from crawls.engine.rows import PAGE_ROWS
    from crawls.models import Page

    page = Page(crawl_id=crawl_id, fetched_at=START)
    template = []
    for f in PAGE_ROWS.fields:
        value = f.pre_save(page, True)
        is_json = f.get_internal_type() == "JSONField"
        template.append(json.dumps(value) if is_json and value is not None else value)
        if not is_json:
            template[-1] = f.get_db_prep_save(value, connection)
    # SQLite takes datetimes as text (naive UTC), PostgreSQL as they are: as Django sends them.
    at = {f.attname: i for i, f in enumerate(PAGE_ROWS.fields)}
    return template, at, isinstance(template[at["fetched_at"]], str)


def make_rows(shape: tuple, seed: int, n: int, first: int, last: int) -> list[list]:
    """Rows first .. last-1 of a crawl of n pages."""
    template, at, time_as_text = shape
    rng = random.Random(f"{seed}:{first}")
    rare = {n * (k + 1) // (RARE_ROWS + 1) for k in range(RARE_ROWS)}
    rows = []
    for i in range(first, last):
        site, brand = rng.choice(SITES)
        kind, _, ctype = pick_kind(rng)
        status = pick_status(rng)[0]
        if rng.random() < 0.5:
            kind += "/" + rng.choice(WORDS)
        url = f"https://{site}/{kind}/{'-'.join(rng.choices(WORDS, k=rng.randint(2, 9)))}-{i}"
        if kind.startswith(("products", "category")) and rng.random() < 0.3:
            url += f"?page={rng.randint(2, 40)}&sort={rng.choice(['price', 'new', 'rating'])}"
        while len(url) < 50:
            url += "/" + rng.choice(WORDS)
        title = " ".join(rng.choices(WORDS, k=rng.randint(3, 9))).capitalize() + f" | {brand}"
        error, extracted = "", None
        if status is None:
            ctype, size, ms, title = "", 0, rng.choice([30_000, rng.randint(1, 900)]), ""
            error = rng.choice(ERRORS)
        elif status in (301, 302):
            ctype, size, ms, title = "text/html", rng.randint(150, 400), rng.randint(20, 200), ""
        elif status >= 400:
            size, ms = int(rng.lognormvariate(8.5, 0.5)), int(rng.lognormvariate(4.5, 0.6))
            ctype, title = "text/html; charset=utf-8", f"{status} error | {brand}"
        else:
            mean = MEAN_LOG_BYTES.get(ctype, 10.3)  # HTML: ~30 KB
            size, ms = int(rng.lognormvariate(mean, 0.8)), int(rng.lognormvariate(4.8, 0.7))
            if not ctype.startswith("text/html"):
                title = ""
            elif kind.startswith("products"):
                extracted = {"price": f"{rng.uniform(1, 500):.2f}"}
        if i in rare:
            title = f"The {RARE} {title}"
        fetched = START + timedelta(seconds=3600 * i / n + rng.uniform(0, 2))
        row = template.copy()
        row[at["url"]] = url
        row[at["url_hash"]] = hashlib.sha1(url.encode()).hexdigest()
        row[at["status"]] = status
        row[at["content_type"]] = ctype
        row[at["bytes"]] = size
        row[at["elapsed_ms"]] = ms
        row[at["depth"]] = pick_depth(rng)[0]
        row[at["fetched_at"]] = str(fetched.replace(tzinfo=None)) if time_as_text else fetched
        row[at["title"]] = title
        row[at["error"]] = error
        row[at["change"]] = pick_change(rng)[0]
        row[at["fp"]] = rng.getrandbits(64) - 2**63
        if extracted:
            row[at["extracted"]] = json.dumps(extracted)
        rows.append(row)
    return rows


def fill(crawl, n: int, seed: int) -> None:
    """n pages of `crawl`: the slices' bulk insert on SQLite, one COPY on PostgreSQL."""
    from django.db import connection, transaction

    from crawls.engine.rows import PAGE_ROWS

    shape = row_template(crawl.pk)
    batches = (make_rows(shape, seed, n, i, min(i + BATCH, n)) for i in range(0, n, BATCH))
    if connection.vendor == "sqlite":
        with connection.cursor() as cur:  # for the load only: setup() closes this connection
            cur.execute("PRAGMA cache_size=-1048576")
            cur.execute("PRAGMA synchronous=OFF")
        for rows in batches:
            PAGE_ROWS.write(rows)
        return
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in PAGE_ROWS.fields)
    sql = f"COPY {quote(PAGE_ROWS.model._meta.db_table)} ({columns}) FROM STDIN"
    with transaction.atomic(), connection.cursor() as cur, cur.cursor.copy(sql) as copy:
        for rows in batches:
            for row in rows:
                copy.write_row(row)


def secondary_indexes() -> list[tuple[str, str]]:
    """(name, CREATE statement) of crawls_page's indexes, but its primary key and unique ones,
    as the migrations made them."""
    from django.db import connection

    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'crawls_page' "
                "AND indexdef NOT LIKE 'CREATE UNIQUE %'"
            )
        else:
            cur.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'index' "
                "AND tbl_name = 'crawls_page' AND sql NOT LIKE 'CREATE UNIQUE %'"
            )
        return cur.fetchall()


def text_triggers() -> list[tuple[str, str]]:
    """(name, CREATE statement) of the triggers that keep SQLite's text index in step with
    crawls_page (crawls/page_search.py); none on PostgreSQL, whose GIN indexes are indexes."""
    from django.db import connection

    if connection.vendor != "sqlite":
        return []
    with connection.cursor() as cur:
        cur.execute(
            "SELECT name, sql FROM sqlite_master "
            "WHERE type = 'trigger' AND tbl_name = 'crawls_page'"
        )
        return cur.fetchall()


def reuse():
    """The measured crawl of a database an earlier run kept (--keep), migrated."""
    from django.core.management import call_command

    from crawls.models import Crawl

    call_command("migrate", verbosity=0)
    crawl = Crawl.objects.get(name="pages bench")
    print(f"reused: {crawl.pages.count():,} pages in the measured crawl")
    return crawl


def setup(pages: int, other: int):
    """Migrate, then the two crawls and their pages; the measured crawl. The page indexes but
    the unique ones are dropped for the load and made again after it from their own CREATE
    statements (as pg_restore does): a sorted build takes seconds, where keeping a dozen
    indexes of random keys up to date row by row takes minutes."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection

    from crawls import services
    from crawls.page_search import TEXT_TABLE

    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user("bench")
    crawls = [
        services.crawl_create(user=user, name=name, seeds=["https://www.northwind.com/"])
        for name in ("pages bench", "another crawl")
    ]
    indexes = secondary_indexes()
    triggers = text_triggers()
    with connection.cursor() as cur:
        for name, _ in indexes:
            cur.execute(f"DROP INDEX {connection.ops.quote_name(name)}")
        for name, _ in triggers:
            cur.execute(f"DROP TRIGGER {connection.ops.quote_name(name)}")
    started = time.perf_counter()
    fill(crawls[1], other, seed=2)
    fill(crawls[0], pages, seed=1)
    written = time.perf_counter()
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute("SET maintenance_work_mem = '512MB'")
        else:
            cur.execute("PRAGMA cache_size=-1048576")
        for _, create in indexes:
            cur.execute(create)
        if triggers:  # the text search's FTS5 table, made from the rows as its migration does
            cur.execute(f"INSERT INTO {TEXT_TABLE}({TEXT_TABLE}) VALUES ('rebuild')")
        for _, create in triggers:
            cur.execute(create)
        if connection.vendor == "postgresql":
            cur.execute("VACUUM ANALYZE crawls_page")
        else:
            cur.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.close()
    assert sorted(secondary_indexes()) == sorted(indexes)
    assert sorted(text_triggers()) == sorted(triggers)
    print(
        f"wrote {pages:,} + {other:,} pages in {written - started:.0f} s "
        f"({(pages + other) / (written - started):,.0f} rows/s), then made "
        f"{len(indexes)} indexes in {time.perf_counter() - written:.0f} s"
    )
    return crawls[0]


# -- the requests -------------------------------------------------------------------------------

SORTED = [
    "url",
    "status",
    "title",
    "content_type",
    "bytes",
    "elapsed_ms",
    "depth",
    "fetched_at",
    "change",
]
FOUR_XX_BYTES = {"status_class": "4xx", "sort": "bytes", "order": "desc"}
# (label, query-string parameters, how it is reached: "" the first screen, ("next", 50) the 50th
# screen by following `next`, ("previous", 50) back from it, ("row", k) the screen after row k)
REQUESTS: list[tuple[str, dict, tuple]] = [
    ("first screen (sort=id)", {}, ()),
    *[
        (f"sort={s}{' desc' if d else ''}", {"sort": s, **({"order": "desc"} if d else {})}, ())
        for s in SORTED
        for d in (False, True)
    ],
    ("status_class=4xx", {"status_class": "4xx"}, ()),
    ("status=404", {"status": "404"}, ()),
    ("content_type=application/pdf", {"content_type": "application/pdf"}, ()),
    ("depth 3-5", {"depth_min": "3", "depth_max": "5"}, ()),
    ("change=changed", {"change": "changed"}, ()),
    ("q=blog (~15 % of pages)", {"q": "blog"}, ()),
    (f"q={RARE} ({RARE_ROWS} pages)", {"q": RARE}, ()),
    ("q=zzqx (none)", {"q": "zzqx"}, ()),
    ("q=zq (2 characters, none: no index)", {"q": "zq"}, ()),
    ("q=error sort=bytes desc", {"q": "error", "sort": "bytes", "order": "desc"}, ()),
    (f"q={RARE} sort=url", {"q": RARE, "sort": "url"}, ()),
    ("status_class=4xx sort=bytes desc", FOUR_XX_BYTES, ()),
    (
        "status_class=3xx sort=bytes desc",
        {"status_class": "3xx", "sort": "bytes", "order": "desc"},
        (),
    ),
    ("status_class=none sort=elapsed_ms", {"status_class": "none", "sort": "elapsed_ms"}, ()),
    (
        "depth 3-5 sort=bytes desc",
        {"depth_min": "3", "depth_max": "5", "sort": "bytes", "order": "desc"},
        (),
    ),
    (
        "2xx + text/html, sort=bytes desc",
        {"status_class": "2xx", "content_type": "text/html", "sort": "bytes", "order": "desc"},
        (),
    ),
    (
        "2xx + application/pdf, sort=bytes desc",
        {
            "status_class": "2xx",
            "content_type": "application/pdf",
            "sort": "bytes",
            "order": "desc",
        },
        (),
    ),
    (
        "change=changed depth 3-5, sort=url",
        {"change": "changed", "depth_min": "3", "depth_max": "5", "sort": "url"},
        (),
    ),
    # A field has no index: its sort is refused past 10,000 pages, taken on fewer.
    ("sort=field:price desc (all pages)", {"sort": "field:price", "order": "desc"}, ()),
    (
        "status=503 sort=field:price desc",
        {"status": "503", "sort": "field:price", "order": "desc"},
        (),
    ),
    ("50th screen (sort=id)", {}, ("next", 50)),
    ("50th screen (sort=url)", {"sort": "url"}, ("next", 50)),
    ("50th screen (sort=fetched_at desc)", {"sort": "fetched_at", "order": "desc"}, ("next", 50)),
    ("50th screen (4xx, sort=bytes desc)", FOUR_XX_BYTES, ("next", 50)),
    ("previous from 50th (sort=url)", {"sort": "url"}, ("previous", 50)),
    ("previous from 50th (4xx, bytes desc)", FOUR_XX_BYTES, ("previous", 50)),
    ("screen after row 500,000 (sort=id)", {}, ("row", 500_000)),
    ("screen after row 500,000 (sort=url)", {"sort": "url"}, ("row", 500_000)),
    ("screen after row 500,000 (sort=status)", {"sort": "status"}, ("row", 500_000)),
]
# Plans printed whatever their time (and those of every request over SLOW_MS).
PLANNED = [
    "sort=url",
    "status_class=4xx sort=bytes desc",
    "depth 3-5",
    f"q={RARE} ({RARE_ROWS} pages)",
    "screen after row 500,000 (sort=id)",
]


def cursors(crawl, params: dict, how: tuple) -> tuple[str, str]:
    """(after, before) of the request. The cursor `next` gives on screen k is made from the
    screen's last row, row k x size - 1 of the order, and `previous` on screen k+1 from its
    first row, the one after: both are made from that row here, in one query, rather than by
    following k cursors (49 screens of a sort that takes seconds would take minutes)."""
    from crawls import page_filters, pages

    if not how:
        return "", ""
    flt = page_filters.PageFilter.from_params(params)
    kind, number = how
    position = number if kind == "row" else (number - 1) * flt.size - (kind == "next")
    key = page_filters.sort_expression(flt.sort)
    order = (key.desc(), "-id") if flt.desc else (key.asc(), "id")
    found = flt.apply(crawl.pages.all()).annotate(sort_key=key).order_by(*order).defer("body")
    rows = list(found[position : position + 1])
    if not rows:
        raise LookupError(f"fewer than {position + 1:,} pages match")
    cursor = pages._encode(rows[0], flt)  # the module's own cursor format
    return ("", cursor) if kind == "previous" else (cursor, "")


def measure(crawl, params: dict, how: tuple, runs: int) -> dict:
    from crawls.page_filters import PageFilter
    from crawls.pages import QueryError, page_slice

    after, before = cursors(crawl, params, how)

    def call():
        return page_slice(crawl, PageFilter.from_params(params), after=after, before=before)

    try:
        call()  # warm-up
    except QueryError as exc:  # refused by design: said so in the table
        return {
            "runs": 0,
            "p50": 0.0,
            "p95": 0.0,
            "max": 0.0,
            "rows": 0,
            "count": "refused",
            "refused": str(exc),
            "after": after,
            "before": before,
        }
    times, deadline = [], time.monotonic() + BUDGET_S
    for i in range(runs):
        started = time.perf_counter()
        found = call()
        times.append((time.perf_counter() - started) * 1000)
        if i + 1 >= MIN_RUNS and time.monotonic() > deadline:
            break
    p95 = statistics.quantiles(times, n=20, method="inclusive")[-1] if len(times) > 1 else times[0]
    count = f"{found.count:,}" + ("+" if found.count_capped else "")
    if found.searched:  # a partial screen: the matches among the pages read
        count = f"{found.count:,}/{found.searched // 1000}k"
    return {
        "runs": len(times),
        "p50": statistics.median(times),
        "p95": p95,
        "max": max(times),
        "rows": len(found.rows),
        "count": count,
        "after": after,
        "before": before,
    }


# -- query plans --------------------------------------------------------------------------------


def queries_of(call) -> list[tuple[str, tuple]]:
    """The SQL and parameters `call` runs."""
    from django.db import connection

    seen = []

    def record(execute, sql, params, many, context):
        seen.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        call()
    return seen


def explain(sql: str, params) -> list[str]:
    from django.db import connection

    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute("EXPLAIN (ANALYZE, COSTS OFF) " + sql, params)
            return [line for (line,) in cur.fetchall()]
        cur.execute("EXPLAIN QUERY PLAN " + sql, params)
        depth, lines = {0: 0}, []
        for node, parent, _, detail in cur.fetchall():
            depth[node] = depth.get(parent, 0) + 1
            lines.append("  " * (depth[node] - 1) + detail)
        return lines


def print_plans(crawl, label: str, params: dict, after: str, before: str) -> None:
    from django.db import connection

    from crawls.page_filters import PageFilter
    from crawls.pages import page_slice

    flt = PageFilter.from_params(params)
    print(f"\n-- {label}")
    for sql, args in queries_of(lambda: page_slice(crawl, flt, after=after, before=before)):
        with connection.cursor() as cur:
            started = time.perf_counter()
            cur.execute(sql, args)
            cur.fetchall()
            ms = (time.perf_counter() - started) * 1000
        where = sql[sql.index(" FROM ") :] if " FROM " in sql else sql  # the columns left out
        print(f"   {ms:.1f} ms: SELECT ...{where}\n   params: {list(args)}")
        for line in explain(sql, args):
            print("     " + line)


# -- one backend, in a child process -------------------------------------------------------------


def child(args) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crawlhub.settings")
    import django

    django.setup()
    from django.db import connection

    label = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}[connection.vendor]
    with connection.cursor() as cur:
        cur.execute("SELECT version()" if label == "PostgreSQL" else "SELECT sqlite_version()")
        version = cur.fetchone()[0].split(" on ")[0]
    print(f"\n=== {label} {version}: {connection.settings_dict['NAME']}")
    crawl = reuse() if args.reuse else setup(args.pages, args.other)
    head = f"{'request':<42} {'runs':>4} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'rows':>5} "
    print(f"\n{head}{'count':>8}")
    results = {}
    requests = [r for r in REQUESTS if not args.match or any(m in r[0] for m in args.match)]
    for name, params, how in requests:
        try:
            r = results[name] = measure(crawl, params, how, args.runs)
        except LookupError as exc:
            print(f"{name:<42} skipped: {exc}")
            continue
        print(
            f"{name:<42} {r['runs']:>4} {r['p50']:>8.1f} {r['p95']:>8.1f} {r['max']:>8.1f} "
            f"{r['rows']:>5} {r['count']:>8}",
            flush=True,
        )
    slow = [n for n, r in results.items() if r["p95"] > SLOW_MS]
    print(f"\nover {SLOW_MS:.0f} ms p95: {', '.join(slow) or 'none'}")
    how = (
        "EXPLAIN ANALYZE: actual rows and times" if label == "PostgreSQL" else "EXPLAIN QUERY PLAN"
    )
    print(f"\nquery plans ({how}): each request's queries, its rows then its count, and the time")
    print("of one run of each")
    for name, params, _ in requests:
        if name in results and (name in PLANNED or name in slow):
            print_plans(crawl, name, params, results[name]["after"], results[name]["before"])


# -- the parent: a database per backend ---------------------------------------------------------


def run_child(args, env: dict) -> None:
    argv = [
        sys.executable,
        __file__,
        "--child",
        "--pages",
        str(args.pages),
        "--other",
        str(args.other),
        "--runs",
        str(args.runs),
    ]
    argv += ["--reuse"] if args.reuse else []
    argv += [f"--match={m}" for m in args.match]
    result = subprocess.run(argv, cwd=ROOT, env={**os.environ, "LOG_LEVEL": "WARNING", **env})
    if result.returncode:
        raise SystemExit(f"the benchmark exited {result.returncode}")


def run_sqlite(args, tmp: Path) -> None:
    run_child(args, {"DATABASE_URL": f"sqlite:///{tmp}/bench.sqlite3"})


def run_postgres(args, tmp: Path) -> None:
    import psycopg
    from psycopg import sql

    parts = urlsplit(args.postgres)
    name = parts.path.lstrip("/")
    if not name or name in ("postgres", "template0", "template1"):
        raise SystemExit("--postgres: name a database of the benchmark's own (it creates it)")
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if exists and not args.reuse:
            raise SystemExit(f"database {name} exists: drop it or name another one")
        if not exists and args.reuse:
            raise SystemExit(f"--reuse: there is no database {name}")
        if not args.reuse:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        run_child(args, {"DATABASE_URL": args.postgres})
    finally:
        if args.keep or args.reuse:
            print(f"kept database {name}")
        else:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier(name)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=1_000_000, help="rows of the measured crawl")
    parser.add_argument("--other", type=int, help="rows of the other crawl (default pages / 5)")
    parser.add_argument("--runs", type=int, default=30, help="timed runs per request")
    parser.add_argument("--postgres", default="", help="also PostgreSQL, in this new database")
    parser.add_argument("--only", choices=["sqlite", "postgres"], help="one backend only")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir and database")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="measure the PostgreSQL database an earlier --keep run left (kept again)",
    )
    parser.add_argument(
        "--match",
        action="append",
        default=[],
        help="only the requests whose name contains this (repeatable)",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.other = args.pages // 5 if args.other is None else args.other
    if args.child:
        return child(args)
    if args.only == "postgres" and not args.postgres:
        parser.error("--only postgres needs --postgres URL")
    if args.reuse and args.only != "postgres":
        parser.error("--reuse is for --only postgres")
    tmp = Path(tempfile.mkdtemp(prefix="crawlhub-pages-bench-"))
    os.environ["CRAWLHUB_DATA_DIR"] = str(tmp)
    try:
        if args.only != "postgres":
            run_sqlite(args, tmp)
        if args.postgres and args.only != "sqlite":
            run_postgres(args, tmp)
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
