"""Many hosts, one per-host delay: does a crawl keep every host at its pace, and never faster?

    .venv/bin/python bench/many_hosts.py                        # 300 hosts x 11 pages, 1 s delay
    .venv/bin/python bench/many_hosts.py --hosts 500 --delay 0.5 --only threaded

A server process listens on port P of several hundred loopback addresses (127.0.1.1,
127.0.1.2, ...: all of 127.0.0.0/8 is loopback on Linux), each a host of its own: "/" links to
/p1 ... /p<pages-1>. It logs every request it is asked (address, path, time) as it arrives. Two
crawlers fetch every page of every host, seeded with every host's "/", with the same rule: a host
is asked at most once per delay, counted from when each request was sent.

- crawlhub: its own embedded Redis and data dir, `manage.py up --workers 2` (real RQ workers, as
  bench/crawl_bench.py runs them), `crawl create --host-delay D --no-robots --start`,
  `crawl wait`; the crawl's start to end as `crawl status` reports it.
- threaded: a plain `requests` crawler, N threads sharing a heap of hosts by next-allowed time;
  a thread takes the host whose time comes first, sleeps until then, sends, and once the host
  has answered its next allowed time is the answer + the delay (crawlhub's rule: a host with a
  delay is asked one request at a time, the delay counted from the send and from the answer).
- threaded-sent: the same crawler with the next allowed time counted from the send only.

The ceiling is hosts/delay pages a second; the ideal time is (pages - 1) x delay from the first
request. Delay violations are counted from the server's own log: per host, two requests less
than the delay apart (and less than 95 % of it, as the server's clock sees arrivals, not sends).
The private-network guard (CRAWLHUB_BLOCK_PRIVATE_NETWORKS) is off here, as for the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import redis
import requests

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))

from crawlhub.processes.launcher import EmbeddedRedis, spawn, stop_process  # noqa: E402

sys.path.insert(0, str(BENCH))
from crawl_bench import free_port, say, wait_until  # noqa: E402

LINK = re.compile(rb'href="([^"]+)"')


def addresses(count: int) -> list[str]:
    """127.0.1.1 ... : away from 127.0.0.1, where other servers of the machine listen."""
    return [f"127.0.{1 + n // 250}.{1 + n % 250}" for n in range(count)]


# -- the server (its own process) ------------------------------------------------------------


def page(pages: int, path: str) -> bytes | None:
    if path == "/":
        links = "".join(f'<a href="/p{n}">p{n}</a>' for n in range(1, pages))
        return f"<html><head><title>root</title></head><body>{links}</body></html>".encode()
    if path.startswith("/p") and path[2:].isdigit() and 0 < int(path[2:]) < pages:
        return f"<html><head><title>{path}</title></head><body>leaf</body></html>".encode()
    return None


def serve(hosts: int, pages: int, port: int, log_path: Path) -> None:
    """Serve every host on `port` until SIGTERM; one log line per request as it arrives."""
    log = open(log_path, "w", buffering=1)  # noqa: SIM115  (line by line: read while serving)
    clock = time.monotonic

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host = writer.get_extra_info("sockname")[0]
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                at = clock()
                path = head.split(b" ", 2)[1].decode()
                log.write(f"{at:.6f} {host} {path}\n")
                body = page(pages, path)
                status = "200 OK" if body is not None else "404 Not Found"
                body = body if body is not None else b"not found"
                writer.write(
                    f"HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, host=addresses(hosts), port=port, backlog=512)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        print("ready", flush=True)
        async with server:
            await stop.wait()
        log.close()

    asyncio.run(main())


class Server:
    def __init__(self, folder: Path, args) -> None:
        self.port = free_port()
        self.log = folder / "server.log"
        self.args = args
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Server:
        cmd = [
            sys.executable,
            __file__,
            "--serve",
            "--hosts",
            str(self.args.hosts),
            "--pages",
            str(self.args.pages),
            "--port",
            str(self.port),
            "--log",
            str(self.log),
        ]
        self.proc = spawn(cmd, stdout=subprocess.PIPE)
        if self.proc.stdout.readline().strip() != b"ready":
            raise SystemExit("the server did not start")
        return self

    def __exit__(self, *exc) -> None:
        stop_process(self.proc)

    def roots(self) -> list[str]:
        return [f"http://{address}:{self.port}/" for address in addresses(self.args.hosts)]

    def requests_seen(self) -> list[tuple[float, str, str]]:
        """(time, host, path) of every request so far (written line by line)."""
        rows = []
        for line in self.log.read_text().splitlines():
            at, host, path = line.split(" ", 2)
            rows.append((float(at), host, path))
        return rows


# -- figures ---------------------------------------------------------------------------------


@dataclass
class Result:
    tool: str
    fetched: int
    seconds: float
    violations: int  # gaps under the delay
    bad: int  # gaps under 95 % of it
    shortest: float
    median: float  # of every host's gaps: delay + how long the crawler takes to come back
    note: str = ""


def judge(tool: str, rows: list[tuple[float, str, str]], delay: float, note: str = "") -> Result:
    """Fetched, first-to-last seconds and delay violations, from the server's log alone."""
    by_host = defaultdict(list)
    for at, host, _ in rows:
        by_host[host].append(at)
    violations = bad = 0
    every = []
    for times in by_host.values():
        times.sort()
        every += [b - a for a, b in zip(times, times[1:], strict=False)]
    for gap in every:
        violations += gap < delay
        bad += gap < delay * 0.95
    every.sort()
    shortest, median = (every[0], every[len(every) // 2]) if every else (0.0, 0.0)
    span = max(r[0] for r in rows) - min(r[0] for r in rows) if rows else 0.0
    return Result(tool, len(rows), span, violations, bad, shortest, median, note)


def table(results: list[Result], args) -> str:
    ceiling = args.hosts / args.delay
    ideal = (args.pages - 1) * args.delay
    lines = [
        f"{args.hosts} hosts x {args.pages} pages, {args.delay:g} s per-host delay: ceiling "
        f"{ceiling:.0f} pages/s, ideal {ideal:.1f} s from the first request to the last",
        f"{'tool':<13} {'fetched':>8} {'seconds':>8} {'pages/s':>8} {'of ceiling':>10} "
        f"{'ideal/actual':>12} {'gaps<delay':>10} {'<95%':>6} {'shortest':>9} {'median':>7}",
    ]
    for r in results:
        rate = r.fetched / r.seconds if r.seconds else 0.0
        lines.append(
            f"{r.tool:<13} {r.fetched:>8} {r.seconds:>8.2f} {rate:>8.1f} {rate / ceiling:>10.2f} "
            f"{ideal / r.seconds if r.seconds else 0:>12.2f} {r.violations:>10} {r.bad:>6} "
            f"{r.shortest:>9.3f} {r.median:>7.3f}"
        )
    lines += [f"  {r.tool}: {r.note}" for r in results if r.note]
    return "\n".join(lines)


# -- crawlhub --------------------------------------------------------------------------------


def run_crawlhub(server: Server, folder: Path, args) -> Result:
    data = folder / "crawlhub"
    data.mkdir(exist_ok=True)
    with EmbeddedRedis(folder / "redis", port=free_port()) as redis_server:
        env = {
            **os.environ,
            "CRAWLHUB_DATA_DIR": str(data),
            "REDIS_URL": redis_server.url,
            "CRAWLHUB_ADMIN_PASSWORD": secrets.token_urlsafe(16),
            "CRAWLHUB_BLOCK_PRIVATE_NETWORKS": "0",
        }
        manage = [sys.executable, str(ROOT / "manage.py")]
        client = redis.Redis.from_url(redis_server.url)
        log = open(folder / "crawlhub-up.log", "wb")  # noqa: SIM115
        up = spawn(
            [*manage, "up", "--workers", str(args.workers), "--port", str(free_port())],
            env=env,
            cwd=ROOT,
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
                    cwd=ROOT,
                    timeout=timeout,
                    capture_output=True,
                    text=True,
                )
                if done.returncode:
                    raise SystemExit(f"manage.py {words[:2]}: {done.stderr or done.stdout}")
                return done.stdout

            before = len(server.requests_seen())
            seeds = [word for root in server.roots() for word in ("--seed", root)]
            say(f"crawlhub: {args.workers} workers, {args.threads} threads x {args.slices} slices")
            crawl = manage_py(
                "crawl",
                "create",
                "--name",
                "many-hosts",
                *seeds,
                "--max-pages",
                "1000000",
                "--max-depth",
                "5",
                "--threads",
                str(args.threads),
                "--slices",
                str(args.slices),
                "--host-delay",
                str(args.delay),
                "--no-robots",
                "--max-retries",
                "0",
                "--start",
            ).split()[-1]
            manage_py(
                "crawl", "wait", crawl, "--timeout", str(args.timeout), timeout=args.timeout + 60
            )
            status = json.loads(manage_py("crawl", "status", crawl, "--json"))
        finally:
            stop_process(up, timeout=60)
            log.close()
            client.close()
    time.sleep(0.5)  # the server's log is buffered: let it catch up
    rows = server.requests_seen()[before:]
    counters = status.get("counters", status)
    note = (
        f"crawl {crawl}: responses {counters.get('responses')}, errors "
        f"{counters.get('errors')}, start to end {status.get('seconds')} s"
    )
    return judge("crawlhub", rows, args.delay, note)


# -- a plain threaded crawler ----------------------------------------------------------------


def run_threaded(server: Server, args, *, from_answer: bool = True) -> Result:
    lock = threading.Condition()
    heap: list[tuple[float, str]] = []  # (next allowed, host), each host at most once
    waiting: dict[str, list[str]] = defaultdict(list)  # host -> URLs to fetch
    busy: set[str] = set()  # hosts a thread holds
    seen: set[str] = set()
    outstanding = [0]  # URLs queued or being fetched

    def add(url: str, not_before: float) -> None:
        if url in seen:
            return
        seen.add(url)
        host = url.split("/", 3)[2]
        outstanding[0] += 1
        if not waiting[host] and host not in busy:
            heapq.heappush(heap, (not_before, host))
        waiting[host].append(url)

    with lock:
        for root in server.roots():
            add(root, 0.0)
    before = len(server.requests_seen())

    def work() -> None:
        session = requests.Session()
        while True:
            with lock:
                while not heap and outstanding[0]:
                    lock.wait(0.1)
                if not outstanding[0]:
                    lock.notify_all()
                    return
                at, host = heapq.heappop(heap)
                url = waiting[host].pop(0)
                busy.add(host)
            pause = at - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            sent = time.monotonic()
            try:
                body = session.get(url, timeout=10).content
            except requests.RequestException:
                body = b""
            with lock:
                base = url.split("/", 3)
                for link in LINK.findall(body):
                    add(f"{base[0]}//{base[2]}{link.decode()}", 0.0)
                busy.discard(host)
                outstanding[0] -= 1
                if waiting[host]:
                    since = time.monotonic() if from_answer else sent
                    heapq.heappush(heap, (since + args.delay, host))
                lock.notify_all()

    since = "answer" if from_answer else "send"
    say(f"threaded: {args.threads * args.slices} threads, delay from the {since}")
    threads = [
        threading.Thread(target=work, daemon=True) for _ in range(args.threads * args.slices)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    time.sleep(0.5)
    tool = "threaded" if from_answer else "threaded-sent"
    return judge(tool, server.requests_seen()[before:], args.delay)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=300)
    parser.add_argument("--pages", type=int, default=11, help="pages per host, its root included")
    parser.add_argument("--delay", type=float, default=1.0, help="per-host delay, seconds")
    parser.add_argument("--only", choices=["both", "crawlhub", "threaded"], default="both")
    parser.add_argument("--workers", type=int, default=2, help="crawlhub RQ workers")
    parser.add_argument("--threads", type=int, default=32, help="crawlhub fetches per slice")
    parser.add_argument("--slices", type=int, default=2, help="crawlhub slices in flight")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per crawl")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--log", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.hosts, args.pages, args.port, args.log)
        return
    folder = Path(tempfile.mkdtemp(prefix="many-hosts-"))
    results = []
    try:
        with Server(folder, args) as server:
            if args.only in ("both", "threaded"):
                results.append(run_threaded(server, args, from_answer=False))
                results.append(run_threaded(server, args))
            if args.only in ("both", "crawlhub"):
                results.append(run_crawlhub(server, folder, args))
    finally:
        subprocess.run(["rm", "-rf", str(folder)], check=False)
    print(table(results, args))


if __name__ == "__main__":
    main()
