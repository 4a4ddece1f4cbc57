"""Crawl benchmark: crawlhub vs Scrapy + scrapy-redis on a generated site served by nginx.

    .venv/bin/python bench/crawl_bench.py                       # 20,000 and 100,000 pages
    .venv/bin/python bench/crawl_bench.py --pages 20000 --only scrapy

Prints, per tool and site size: URLs fetched, seconds, pages/s (URLs fetched per second, 404s,
500s and redirects included), Redis commands per page as clients sent them (EVALSHA and plain
commands, counted in each client process by bench/redis_counting/sitecustomize.py) and the
network round trips they took, Redis commands per page as INFO commandstats counts them
(which includes every command a Lua script runs inside Redis), and Redis bytes per fingerprint
(MEMORY USAGE of the fingerprint keys / fingerprints), then the crawlhub / Scrapy ratio. Each
tool gets its own embedded Redis on a free port. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis
import requests

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))

from crawlhub.processes.launcher import EmbeddedRedis, spawn, stop_process  # noqa: E402
from crawlhub.sample_site import SampleSite  # noqa: E402
from crawls.engine.frontier import Frontier  # noqa: E402

SCRAPY_VENV = BENCH / ".venv-scrapy"
# --rules: three CSS fields of every page, as a crawl that extracts data would have.
BENCH_RULES = [
    {"name": "title", "kind": "css", "expr": "title"},
    {"name": "heading", "kind": "css", "expr": "h1"},
    {"name": "links", "kind": "css", "expr": "ul a::attr(href)", "many": True},
]
NGINX = "/usr/sbin/nginx"
COUNTING = BENCH / "redis_counting"

sys.path.insert(0, str(COUNTING))
from sitecustomize import totals as client_totals  # noqa: E402


@dataclass
class Result:
    tool: str
    pages: int  # pages in the site
    urls: int  # URLs fetched
    seconds: float
    commands: int  # Redis commands during the crawl (INFO commandstats: includes inside Lua)
    fingerprint_bytes: float | None
    note: str = ""
    client_commands: int | None = None  # sent by clients (EVALSHA + plain commands)
    scripts: int | None = None  # of which EVAL/EVALSHA
    round_trips: int | None = None  # network round trips (a pipeline is one)
    # CPU seconds during the crawl: every process `up` runs (workers, their horses, web, cron)
    # and Redis (INFO cpu).
    cpu: float | None = None

    @property
    def rate(self) -> float:
        return self.urls / self.seconds if self.seconds else 0.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def wait_until(check, *, timeout: float, what: str, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(interval)
    raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")


# -- the site --------------------------------------------------------------------------------


def start_nginx(
    site: SampleSite, folder: Path, *, access_log: Path | None = None, port: int | None = None
) -> tuple[subprocess.Popen, str]:
    """Write `site` as static files and serve it with nginx on a free loopback port; with
    `access_log`, each request is logged there as "<request URI> <status>". With `port`, the
    site written there before for that port (its pages hold absolute links with it) is served
    again as it is."""
    if not Path(NGINX).exists():
        raise SystemExit(f"{NGINX} not found: install Debian's nginx (apt-get install -y nginx)")
    written, port = port is not None, port or free_port()
    origin = f"http://127.0.0.1:{port}"
    if not written:
        site.served_from(directory=folder, origin=origin)
    temp = folder / "nginx-temp"
    temp.mkdir(exist_ok=True)
    user = "user root;" if os.geteuid() == 0 else ""  # workers must read a 0700 temp dir
    (folder / "nginx.conf").write_text(
        f"""{user}
daemon off;
worker_processes 1;
pid {folder}/nginx.pid;
error_log {folder}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    log_format bench '$request_uri $status';
    access_log {f"{access_log} bench" if access_log else "off"};
    types {{ text/plain txt; text/html html; }}
    default_type text/html;
    charset utf-8;
    keepalive_requests 1000000;
    keepalive_timeout 120s;
    client_body_temp_path {temp}/body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {folder}/htdocs;
        include {folder}/locations.conf;
    }}
}}
"""
    )
    nginx = spawn(
        [NGINX, "-e", f"{folder}/nginx-error.log", "-p", str(folder), "-c", f"{folder}/nginx.conf"]
    )

    def up() -> bool:
        if nginx.poll() is not None:
            log = (folder / "nginx-error.log").read_text(errors="replace")
            raise SystemExit(f"nginx exited: {log[-2000:]}")
        try:
            return requests.get(origin + "/", timeout=1).status_code == 200
        except requests.ConnectionError:
            return False

    wait_until(up, timeout=120, what="nginx")  # a million pages' locations load slowly
    return nginx, origin


# -- Redis figures ---------------------------------------------------------------------------


def tree_cpu(pid: int) -> float:
    """CPU seconds of process `pid` and every process below it, live ones and those already
    waited for (utime, stime, cutime, cstime of /proc/<pid>/stat): a delta of two readings is
    what the tree used in between, whatever else the machine ran."""
    parents: dict[int, int] = {}
    times: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = sum(int(value) for value in fields[11:15])
    tree, frontier = set(), [pid]
    while frontier:
        current = frontier.pop()
        tree.add(current)
        frontier += [child for child, parent in parents.items() if parent == current]
    return sum(times.get(p, 0) for p in tree) / os.sysconf("SC_CLK_TCK")


def total_calls(client: redis.Redis) -> int:
    return sum(
        v["calls"] for k, v in client.info("commandstats").items() if k.startswith("cmdstat_")
    )


def redis_cpu(client: redis.Redis) -> float:
    """CPU seconds the redis-server process has used (INFO cpu, user + system)."""
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def bytes_per_fingerprint(client: redis.Redis, pattern: str, count: int) -> float | None:
    used = sum(client.memory_usage(key, samples=0) or 0 for key in client.scan_iter(pattern))
    return used / count if used and count else None


class FingerprintSampler(threading.Thread):
    """Every few seconds during a crawlhub crawl: bytes of its seen keys / fingerprints counted.

    For when the seen keys are gone by the end of the crawl. Counts its own Redis commands so
    they can be taken out of the commands-per-page figure.
    """

    def __init__(self, url: str, crawl: str, every: float = 5.0) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis.from_url(url)
        self.crawl, self.every = crawl, every
        self.commands = 0
        self.per_fingerprint: float | None = None
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(self.every):
            keys = list(
                self.client.scan_iter(
                    Frontier(self.crawl, client=self.client).key("seen:*"), count=1000
                )
            )
            used = sum(self.client.memory_usage(key, samples=0) or 0 for key in keys)
            seen = int(self.client.hget(f"ch:{{c{self.crawl}}}:stats", "requests") or 0)
            self.commands += len(keys) + len(keys) // 1000 + 2
            if used and seen:
                self.per_fingerprint = used / seen

    def stop(self) -> None:
        self._done.set()
        self.join()


# -- Scrapy + scrapy-redis -------------------------------------------------------------------


def counting_env(folder: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """env for client processes whose Redis commands are counted into folder."""
    folder.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ if env is None else env)
    env["CRAWLBENCH_REDIS_COUNTS"] = str(folder)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(COUNTING), env.get("PYTHONPATH")]))
    return env


def ensure_scrapy_venv() -> Path:
    scrapy = SCRAPY_VENV / "bin" / "scrapy"
    if not scrapy.exists():
        say(f"creating {SCRAPY_VENV} (scrapy, scrapy-redis, redis)")
        subprocess.run([sys.executable, "-m", "venv", str(SCRAPY_VENV)], check=True)
        pip = [str(SCRAPY_VENV / "bin" / "pip"), "install", "-q"]
        subprocess.run([*pip, "scrapy", "scrapy-redis", "redis"], check=True)
    return scrapy


def run_scrapy(site: SampleSite, origin: str, folder: Path, args) -> Result:
    scrapy = ensure_scrapy_venv()
    expected = {origin + path for path in site.expected()}
    with EmbeddedRedis(folder / "redis-scrapy", port=free_port()) as server:
        client = redis.Redis.from_url(server.url)
        counts = folder / "redis-counts-scrapy"
        env = counting_env(counts)
        before = total_calls(client)
        outs = [folder / f"scrapy-{n}.json" for n in range(args.workers)]
        common = ["-s", f"REDIS_URL={server.url}", "-s", f"CONCURRENT_REQUESTS={args.concurrency}"]
        common += ["-s", f"CONCURRENT_REQUESTS_PER_DOMAIN={args.concurrency}"]
        common += [word for setting in args.scrapy_set for word in ("-s", setting)]
        say(f"scrapy: {args.workers} processes, {len(expected)} URLs to fetch")
        started = time.time()
        logs = [open(out.with_suffix(".log"), "wb") for out in outs]  # noqa: SIM115
        procs = [
            spawn(
                [str(scrapy), "runspider", str(BENCH / "scrapy_spider.py"), *common]
                + ["-a", f"start_url={origin}/", "-a", f"out={out}"]
                + ["-a", f"role={'seed' if n == 0 else 'join'}"],
                cwd=folder,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            for n, (out, log) in enumerate(zip(outs, logs, strict=True))
        ]
        try:
            for proc in procs:
                proc.wait(timeout=max(1.0, started + args.timeout - time.time()))
        except subprocess.TimeoutExpired:
            raise SystemExit(f"scrapy did not finish within {args.timeout}s") from None
        finally:
            for proc in procs:
                stop_process(proc)
            for log in logs:
                log.close()
        ended = time.time()
        after = total_calls(client)
        fingerprints = client.scard("crawlbench:dupefilter")
        per_fp = bytes_per_fingerprint(client, "crawlbench:dupefilter", fingerprints)
        left = client.zcard("crawlbench:requests")
        client.delete("crawlbench:dupefilter", "crawlbench:requests")
        client.close()
    for out in outs:
        if not out.exists():
            tail = out.with_suffix(".log").read_text(errors="replace")[-3000:]
            raise SystemExit(f"scrapy wrote no {out.name}; its log ends:\n{tail}")
    records = [json.loads(out.read_text()) for out in outs]
    fetched = [url for record in records for url in record["fetched"]]
    unique = set(fetched)
    first, last = min(r["opened"] for r in records), max(r["last"] for r in records)
    note = (
        f"{len(fetched)} fetches, {len(unique)} unique, missing {len(expected - unique)}, "
        f"extra {len(unique - expected)}, left in queue {left}; per process "
        f"{[len(r['fetched']) for r in records]}; launch to exit {ended - started:.1f}s"
    )
    if unique != expected or left:
        note = "INCOMPLETE: " + note
    sent, scripts, trips = client_totals(str(counts))
    return Result(
        "scrapy+redis",
        site.pages,
        len(fetched),
        last - first,
        after - before,
        per_fp,
        note,
        client_commands=sent,
        scripts=scripts,
        round_trips=trips,
    )


# -- crawlhub --------------------------------------------------------------------------------


def run_crawlhub(
    site: SampleSite,
    origin: str,
    folder: Path,
    args,
    *,
    root: Path = ROOT,
    expected: set[str] | None = None,
    ended: Callable[[redis.Redis, Path], None] | None = None,
) -> Result:
    """crawlhub as checked out at `root` (this checkout by default) crawls the site.
    `expected`: site.expected(), when the caller has it already (a minute at a million pages).
    `ended` is called once the crawl is over, before its Redis stops, with a client of that
    Redis and the data folder (bench/million_pages.py reads Redis' peak memory there)."""
    expected = expected if expected is not None else site.expected()
    data = folder / "crawlhub"
    # A fresh database and Redis for every run (crawl ids start again at 1).
    subprocess.run(["rm", "-rf", str(data), str(folder / "redis-crawlhub")], check=True)
    data.mkdir()
    with EmbeddedRedis(folder / "redis-crawlhub", port=free_port()) as server:
        counts = folder / "redis-counts-crawlhub"
        env = counting_env(counts, {**os.environ, "CRAWLHUB_DATA_DIR": str(data)})
        env["REDIS_URL"] = server.url
        env["CRAWLHUB_ADMIN_PASSWORD"] = secrets.token_urlsafe(16)
        manage = [sys.executable, str(root / "manage.py")]
        client = redis.Redis.from_url(server.url)
        log = open(folder / "crawlhub-up.log", "wb")  # noqa: SIM115
        up = spawn(
            [*manage, "up", "--workers", str(args.workers), "--port", str(free_port())],
            env=env,
            cwd=root,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_until(
                lambda: client.scard("rq:workers") >= args.workers,
                timeout=90,
                what=f"{args.workers} RQ workers (see {folder}/crawlhub-up.log)",
            )

            def manage_py(*words: str, timeout: float = 120) -> str:
                done = subprocess.run(
                    [*manage, *words],
                    env=env,
                    cwd=root,
                    timeout=timeout,
                    capture_output=True,
                    text=True,
                )
                if done.returncode:
                    raise SystemExit(f"manage.py {' '.join(words)}: {done.stderr or done.stdout}")
                return done.stdout

            before = total_calls(client)
            cpu_before = redis_cpu(client)
            tree_before = tree_cpu(up.pid)
            sent_before = client_totals(str(counts))
            say(f"crawlhub: {args.workers} workers, {len(expected)} URLs to fetch")
            started = time.monotonic()
            create = (
                f"crawl create --name bench-{site.pages} --seed {origin}/ --max-pages "
                f"{len(expected) + 1000} --max-depth 1000 --threads {args.threads} --slices "
                f"{args.slices} --host-delay 0 --no-robots --max-retries 0 --start"
            ).split()  # no retries: like the Scrapy run (RETRY_ENABLED off), each URL once
            if args.rules:
                create += ["--extract-rules", json.dumps(BENCH_RULES)]
            crawl = manage_py(*create).split()[-1]
            sampler = FingerprintSampler(server.url, crawl)
            sampler.start()
            manage_py(
                "crawl", "wait", crawl, "--timeout", str(args.timeout), timeout=args.timeout + 60
            )
            seconds = time.monotonic() - started
            tree = tree_cpu(up.pid) - tree_before
            sampler.stop()
            after = total_calls(client) - sampler.commands
            cpu = redis_cpu(client) - cpu_before
            sent = [b - a for a, b in zip(sent_before, client_totals(str(counts)), strict=True)]
            status = json.loads(manage_py("crawl", "status", crawl, "--json"))
            status = {**status, **status.get("counters", {})}  # flat or nested counters
            fingerprints = int(status.get("requests") or 0)
            per_fp = bytes_per_fingerprint(
                client, Frontier(crawl, client=client).key("seen:*"), fingerprints
            )
            per_fp = per_fp or sampler.per_fingerprint
            stored = manage_py(
                "shell",
                "-c",
                "from crawls.models import Page; "
                f"print(Page.objects.filter(crawl_id={crawl}).count())",
            ).split()[-1]
            if ended is not None:
                ended(client, data)
        finally:
            stop_process(up, timeout=60)
            log.close()
            client.close()
    responses = int(status.get("responses") or 0)
    fetched = responses + int(status.get("errors") or 0)  # 500s end as errors, not responses
    # Timed like Scrapy (spider opened -> last response): the crawl's own start -> end, as
    # `crawl status` reports it. The wall time also counts two manage.py start-ups.
    crawl_seconds = float(status["seconds"])
    note = (
        f"crawl {crawl}: requests {status.get('requests')}, responses {responses}, repeats "
        f"{status.get('repeats')}, errors {status.get('errors')}, pages in DB {stored}, "
        f"expected {len(expected)}; start to end {crawl_seconds:.1f}s, wall from "
        f"`crawl create` to `crawl wait` returning {seconds:.1f}s; Redis CPU "
        f"{cpu * 1e6 / max(1, responses + int(status.get('errors') or 0)):.0f} µs a URL "
        "(INFO cpu, the whole deployment's traffic)"
    )
    if fetched != len(expected) or fingerprints != len(expected):
        note = "MISMATCH: " + note
    if per_fp is None:
        note += "; no fingerprint keys (ch:{c<ID>}:seen:*) found: bytes/fingerprint not measured"
    return Result(
        "crawlhub+rules" if args.rules else "crawlhub",
        site.pages,
        fetched,
        crawl_seconds,
        after - before,
        per_fp,
        note,
        client_commands=sent[0],
        scripts=sent[1],
        round_trips=sent[2],
        cpu=tree + cpu,
    )


# -- main ------------------------------------------------------------------------------------


def per_url(count: int | None, r: Result) -> str:
    return f"{count / r.urls:.2f}" if count is not None and r.urls else "n/a"


def table(results: list[Result]) -> str:
    lines = [
        f"{'':<14}{'':>8}{'':>8}{'':>9}{'':>9}{'---------- Redis per page ----------':>40}",
        f"{'tool':<14}{'pages':>8}{'URLs':>8}{'seconds':>9}{'pages/s':>9}"
        f"{'client cmds':>12}{'(EVALSHA)':>10}{'round trips':>12}{'all cmds':>10}"
        f"{'bytes/fingerprint':>19}",
    ]
    for r in results:
        per_fp = f"{r.fingerprint_bytes:.1f}" if r.fingerprint_bytes else "n/a"
        lines.append(
            f"{r.tool:<14}{r.pages:>8}{r.urls:>8}{r.seconds:>9.1f}{r.rate:>9.0f}"
            f"{per_url(r.client_commands, r):>12}{per_url(r.scripts, r):>10}"
            f"{per_url(r.round_trips, r):>12}{per_url(r.commands, r):>10}{per_fp:>19}"
        )
    lines.append(
        "  client cmds: commands clients sent (EVALSHA + plain; a pipeline's commands each "
        "count); round trips: network exchanges; all cmds: INFO commandstats, which also "
        "counts every command run inside a Lua script"
    )
    for r in results:
        lines.append(f"  {r.tool} {r.pages}: {r.note}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, nargs="+", default=[20_000, 100_000])
    parser.add_argument("--only", choices=["both", "crawlhub", "scrapy"], default="both")
    parser.add_argument(
        "--scrapy-max-pages",
        type=int,
        default=20_000,
        help="run Scrapy only on sites up to this size (default 20000)",
    )
    parser.add_argument(
        "--workers", type=int, default=2, help="crawlhub RQ workers / Scrapy processes"
    )
    parser.add_argument("--threads", type=int, default=32, help="crawlhub fetches per slice")
    parser.add_argument("--slices", type=int, default=2, help="crawlhub slices in flight")
    parser.add_argument("--concurrency", type=int, default=32, help="Scrapy CONCURRENT_REQUESTS")
    parser.add_argument(
        "--scrapy-set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an extra Scrapy setting (repeatable)",
    )
    parser.add_argument("--timeout", type=int, default=900, help="seconds per crawl")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, site)")
    parser.add_argument(
        "--rules",
        action="store_true",
        help="crawlhub extracts three CSS fields from every page (title, heading, its links)",
    )
    args = parser.parse_args()

    results: list[Result] = []
    for pages in args.pages:
        site = SampleSite(pages=pages, seed=args.seed)
        folder = Path(tempfile.mkdtemp(prefix=f"crawl-bench-{pages}-"))
        say(f"writing a {pages}-page site to {folder}")
        nginx, origin = start_nginx(site, folder)
        try:
            if args.only in ("both", "scrapy") and pages <= args.scrapy_max_pages:
                results.append(run_scrapy(site, origin, folder, args))
            if args.only in ("both", "crawlhub"):
                results.append(run_crawlhub(site, origin, folder, args))
        finally:
            stop_process(nginx)
            if not args.keep:
                subprocess.run(["rm", "-rf", str(folder)], check=False)
        print(table(results[-2:] if args.only == "both" else results[-1:]), flush=True)

    print("\n" + table(results))
    by = {(r.tool, r.pages): r for r in results}
    for pages in args.pages:
        ours, theirs = by.get(("crawlhub", pages)), by.get(("scrapy+redis", pages))
        if ours and theirs and theirs.rate:
            print(
                f"ratio at {pages} pages: crawlhub {ours.rate / theirs.rate:.1f}x "
                "Scrapy + scrapy-redis (target >= 5x; crawlhub target >= 1000 pages/s)"
            )


if __name__ == "__main__":
    main()
