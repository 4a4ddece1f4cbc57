"""Fair sharing: a small crawl's time alone, and beside a big crawl on the same Redis and workers.

    .venv/bin/python bench/fairness.py                          # 50,000 and 500 pages
    .venv/bin/python bench/fairness.py --rounds 3 --maxmemory-mb 24

One `manage.py up --workers 2` (as bench/crawl_bench.py runs it: a fresh database and embedded
Redis, 32 threads x 2 slices a crawl, no robots.txt, no retries) and two generated sites served
by nginx, a big one and a small one. Each round crawls the small site alone, then starts the big
crawl, waits until it fetches steadily, and crawls the small site again beside it (a new crawl
of the same site), and cancels the big crawl. It prints each small crawl's time (its own start
to end, `crawl status`), how many pages the big crawl had fetched when the small one started and
ended (it must not have finished: the small one ran beside it), the ratio beside / alone, and
the load average, since the machine may be shared. With --maxmemory-mb, Redis gets that
maxmemory (noeviction) once the small crawl alone is done: the big crawl's queue then holds
crawlhub's budget of it (CRAWLHUB_REDIS_MEMORY_BUDGET_PERCENT), and the small crawl runs beside a
crawl that holds Redis' memory. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from crawl_bench import ROOT, free_port, say, start_nginx, wait_until  # noqa: E402

from crawlhub.processes.launcher import EmbeddedRedis, spawn, stop_process  # noqa: E402
from crawlhub.sample_site import SampleSite  # noqa: E402
from crawls.engine.frontier import Frontier  # noqa: E402


class Deployment:
    """`manage.py up --workers N` on a fresh database and embedded Redis, and its CLI."""

    def __init__(self, folder: Path, workers: int, *, budget_percent: int) -> None:
        self.folder, self.workers, self.budget_percent = folder, workers, budget_percent

    def __enter__(self) -> Deployment:
        data = self.folder / "crawlhub"
        data.mkdir()
        self.redis_server = EmbeddedRedis(self.folder / "redis", port=free_port())
        self.redis_server.__enter__()
        self.env = {**os.environ, "CRAWLHUB_DATA_DIR": str(data)}
        self.env["REDIS_URL"] = self.redis_server.url
        self.env["CRAWLHUB_REDIS_MEMORY_BUDGET_PERCENT"] = str(self.budget_percent)
        self.env["CRAWLHUB_ADMIN_PASSWORD"] = secrets.token_urlsafe(16)
        self.client = redis.Redis.from_url(self.redis_server.url)
        self.log = open(self.folder / "crawlhub-up.log", "wb")  # noqa: SIM115
        self.up = spawn(
            [sys.executable, str(ROOT / "manage.py"), "up", "--workers", str(self.workers)]
            + ["--port", str(free_port())],
            env=self.env,
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_until(
            lambda: self.client.scard("rq:workers") >= self.workers,
            timeout=120,
            what=f"{self.workers} RQ workers (see {self.folder}/crawlhub-up.log)",
        )
        return self

    def __exit__(self, *exc) -> None:
        stop_process(self.up, timeout=60)
        self.log.close()
        self.client.close()
        self.redis_server.__exit__(*exc)

    def manage(self, *words: str, timeout: float = 120) -> str:
        done = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), *words],
            env=self.env,
            cwd=ROOT,
            timeout=timeout,
            capture_output=True,
            text=True,
        )
        if done.returncode:
            raise SystemExit(f"manage.py {' '.join(words)}: {done.stderr or done.stdout}")
        return done.stdout

    def start(self, name: str, origin: str, pages: int, args) -> str:
        words = (
            f"crawl create --name {name} --seed {origin}/ --max-pages {pages + 1000} "
            f"--max-depth 1000 --threads {args.threads} --slices {args.slices} --host-delay 0 "
            "--no-robots --max-retries 0 --start"
        ).split()
        return self.manage(*words).split()[-1]

    def status(self, crawl: str) -> dict:
        status = json.loads(self.manage("crawl", "status", crawl, "--json"))
        return {**status, **status.get("counters", {})}

    def fetched(self, crawl: str) -> int:
        """Pages the crawl has fetched (responses and errors), read from Redis."""
        stats = Frontier(crawl, client=self.client).key("stats")
        answered, errors = self.client.hmget(stats, "responses", "errors")
        return int(answered or 0) + int(errors or 0)


def small_crawl(up: Deployment, origin: str, site: SampleSite, name: str, args) -> dict:
    """The small crawl, started and waited for: its seconds, or None when it did not finish
    within --small-timeout (it is cancelled then)."""
    crawl = up.start(name, origin, site.pages, args)
    expected = len(site.expected())
    try:
        wait_until(
            lambda: up.fetched(crawl) >= expected, timeout=args.small_timeout, what="", interval=0.2
        )
    except SystemExit:
        fetched = up.fetched(crawl)
        up.manage("crawl", "cancel", crawl)
        return {"crawl": crawl, "seconds": None, "pages": fetched}
    up.manage("crawl", "wait", crawl, "--timeout", "120", timeout=180)
    status = up.status(crawl)
    fetched = int(status.get("responses") or 0) + int(status.get("errors") or 0)
    if fetched != expected or status.get("state") != "finished":
        raise SystemExit(f"small crawl {crawl}: {status.get('state')}, {fetched} of {expected}")
    return {"crawl": crawl, "seconds": float(status["seconds"]), "pages": fetched}


def memory_used(up: Deployment) -> tuple[int, int]:
    """Redis' used memory and maxmemory, in bytes."""
    memory = up.client.info("memory")
    return int(memory["used_memory"]), int(memory.get("maxmemory") or 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--big", type=int, default=50_000, help="pages of the big site")
    parser.add_argument("--small", type=int, default=500, help="pages of the small site")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=32)
    parser.add_argument("--slices", type=int, default=2)
    parser.add_argument(
        "--steady",
        type=int,
        default=3000,
        help="pages the big crawl fetches before the small one starts beside it",
    )
    parser.add_argument(
        "--maxmemory-mb",
        type=float,
        default=0,
        help="Redis' maxmemory once the small crawl alone is done (0: none)",
    )
    parser.add_argument(
        "--budget-percent",
        type=int,
        default=85,
        help="the deployment's CRAWLHUB_REDIS_MEMORY_BUDGET_PERCENT (default 85); a small "
        "maxmemory needs a lower one: a slice reads Redis' memory once a second, and a fast "
        "crawl adds about 0.5 MB a second before its slices see the budget",
    )
    parser.add_argument("--timeout", type=int, default=900, help="seconds for the big crawl")
    parser.add_argument(
        "--small-timeout",
        type=int,
        default=120,
        help="seconds the small crawl may take; past them it is cancelled and shown as such",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, sites)")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="fairness-"))
    big_site, small_site = SampleSite(pages=args.big, seed=1), SampleSite(pages=args.small, seed=2)
    say(f"writing a {args.big}-page and a {args.small}-page site to {folder}")
    (folder / "big").mkdir()
    (folder / "small").mkdir()
    servers = []
    rows: list[dict] = []
    try:
        big_nginx, big_origin = start_nginx(big_site, folder / "big")
        servers.append(big_nginx)
        small_nginx, small_origin = start_nginx(small_site, folder / "small")
        servers.append(small_nginx)
        with Deployment(folder, args.workers, budget_percent=args.budget_percent) as up:
            for round_ in range(1, args.rounds + 1):
                up.client.config_set("maxmemory", "0")
                say(f"round {round_}: the small crawl alone")
                alone = small_crawl(up, small_origin, small_site, f"small-alone-{round_}", args)
                load_alone = os.getloadavg()[0]
                if alone["seconds"] is None:
                    raise SystemExit(f"the small crawl alone did not finish: {alone}")
                if args.maxmemory_mb:
                    up.client.config_set("maxmemory-policy", "noeviction")
                    up.client.config_set("maxmemory", str(int(args.maxmemory_mb * 2**20)))
                say(f"round {round_}: the big crawl, then the small one beside it")
                big = up.start(f"big-{round_}", big_origin, big_site.pages, args)
                if args.maxmemory_mb:
                    budget = int(args.maxmemory_mb * 2**20) * args.budget_percent // 100
                    wait_until(
                        lambda budget=budget: memory_used(up)[0] >= budget,
                        timeout=args.timeout,
                        what="Redis to hold crawlhub's budget of its memory",
                        interval=0.5,
                    )
                    time.sleep(2)  # the big crawl's slices see it (once a second)
                else:
                    wait_until(
                        lambda big=big: up.fetched(big) >= args.steady,
                        timeout=args.timeout,
                        what=f"the big crawl to fetch {args.steady} pages",
                        interval=0.5,
                    )
                big_before = up.fetched(big)
                beside = small_crawl(up, small_origin, small_site, f"small-beside-{round_}", args)
                big_after = up.fetched(big)
                load_beside = os.getloadavg()[0]
                big_state = up.status(big)["state"]
                used, maxmemory = memory_used(up)
                up.manage("crawl", "cancel", big)
                if big_state != "running":
                    raise SystemExit(f"the big crawl was {big_state} when the small one ended")
                row = {
                    "alone": alone["seconds"],
                    "beside": beside["seconds"],
                    "small_pages": beside["pages"],
                    "big_before": big_before,
                    "big_after": big_after,
                    "load_alone": load_alone,
                    "load_beside": load_beside,
                    "memory": f"{used / 2**20:.1f} MB"
                    + (f" of {maxmemory / 2**20:.1f}" if maxmemory else ""),
                }
                rows.append(row)
                say(f"round {round_}: {row}")
                wait_until(
                    lambda: up.client.llen("rq:queue:crawls") == 0,
                    timeout=120,
                    what="the cancelled crawl's slices to leave the queue",
                )
    finally:
        for server in servers:
            stop_process(server)
        if not args.keep:
            subprocess.run(["rm", "-rf", str(folder)], check=False)

    print(
        f"small crawl ({args.small} pages) alone and beside a {args.big}-page crawl; "
        f"{args.workers} workers, {args.threads} threads x {args.slices} slices each"
        + (
            f", Redis maxmemory {args.maxmemory_mb:g} MB, budget {args.budget_percent}%"
            if args.maxmemory_mb
            else ""
        )
    )
    print(
        f"{'round':>5}{'alone s':>9}{'load':>6}{'beside s':>10}{'load':>6}{'ratio':>7}"
        f"{'big pages (start..end)':>25}  Redis memory at the end"
    )
    for n, row in enumerate(rows, 1):
        beside = (
            f"{row['beside']:>10.1f}"
            if row["beside"] is not None
            else f"{'>' + str(args.small_timeout):>10}"
        )
        ratio = row["beside"] / row["alone"] if row["beside"] is not None else None
        print(
            f"{n:>5}{row['alone']:>9.1f}{row['load_alone']:>6.1f}{beside}"
            f"{row['load_beside']:>6.1f}{f'{ratio:.1f}' if ratio else 'n/a':>7}"
            f"{row['big_before']:>12,}..{row['big_after']:<11,}  {row['memory']}"
            + (f"; small crawl not done: {row['small_pages']} pages" if ratio is None else "")
        )
    ratios = [row["beside"] / row["alone"] for row in rows if row["beside"] is not None]
    if ratios:
        print(f"ratio beside / alone: median {statistics.median(ratios):.1f}")


if __name__ == "__main__":
    main()
