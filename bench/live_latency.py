"""Live pages: how fast a counter change reaches an open page, and what 50 open pages cost a crawl.

    .venv/bin/python bench/live_latency.py                 # both parts
    .venv/bin/python bench/live_latency.py --pages 5000 --clients 50 --rounds 2

Everything real and on loopback, in a temp dir: an embedded Redis, SQLite, daphne serving
crawlhub.asgi, two `manage.py rqworker` processes and the cron supervisor; the websocket clients
are plain sockets in this process, signed in with a session cookie.

(a) Latency. A publisher thread plays a worker: every 50 ms it bumps the crawl's `responses`
    counter in Redis (HINCRBY) and calls crawls.engine.live.publish_crawl, throttled as in the
    slices.
    For each change, latency = when the first websocket message showing it arrived - when the
    counter changed; it includes the wait for the throttle slot (<= 250 ms). A second run
    publishes every change with force=True, 300 ms apart: the transport alone
    (publish_crawl -> channels-redis -> daphne -> socket).
(b) Slowdown. A crawl of the sample site (served by a separate process) on 2 workers, with 0
    and with N websocket clients on that crawl's page, alternating, `--rounds` times each;
    crawl time = finished_at - started_at. Slowdown = mean(with) / mean(without) - 1.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# -- a minimal websocket client (server frames are unmasked; daphne does not fragment) -------


class Socket:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int, path: str, cookie: str) -> Socket:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            f"Origin: http://127.0.0.1:{port}\r\nCookie: {cookie}\r\n\r\n".encode()
        )
        head = await reader.readuntil(b"\r\n\r\n")
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise RuntimeError(f"websocket refused: {head[:200]!r}")
        return cls(reader, writer)

    async def recv(self) -> str | None:
        """The next text message; None when the server closed."""
        while True:
            b1, b2 = await self.reader.readexactly(2)
            n = b2 & 0x7F
            if n == 126:
                n = struct.unpack(">H", await self.reader.readexactly(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", await self.reader.readexactly(8))[0]
            data = await self.reader.readexactly(n)
            opcode = b1 & 0x0F
            if opcode == 8:
                return None
            if opcode == 1:
                return data.decode()

    def close(self) -> None:
        self.writer.close()


# -- the stack ------------------------------------------------------------------------------


class Stack:
    def __init__(self, tmp: Path) -> None:
        from crawlhub.processes import launcher

        self.tmp = tmp
        self.redis = launcher.EmbeddedRedis(tmp / "redis", port=free_port())
        self.redis.start()
        self.port = free_port()
        self.env = {
            **os.environ,
            "CRAWLHUB_DATA_DIR": str(tmp),
            "DATABASE_URL": f"sqlite:///{tmp}/bench.sqlite3",
            # redis-py 8 reads with a 5 s timeout, channels-redis blocks 5 s in BZPOPMIN.
            "REDIS_URL": self.redis.url,
            "CRAWLHUB_SLICE_SECONDS": "20",
            "CRAWLHUB_SUPERVISOR_SECONDS": "1",
            "LOG_LEVEL": "WARNING",
        }
        os.environ.update(self.env)
        os.environ["DJANGO_SETTINGS_MODULE"] = "crawlhub.settings"
        # This process mixes its asyncio websocket clients with plain ORM calls (bench only).
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        self.procs: list[subprocess.Popen] = []

    def spawn(self, *args: str) -> subprocess.Popen:
        log = open(self.tmp / f"{args[1] if len(args) > 1 else args[0]}.log", "a")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, *args],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def start(self) -> None:
        self.spawn(
            "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port), "crawlhub.asgi:application"
        )
        self.spawn("manage.py", "rqworker", "control", "crawls", "default")
        self.spawn("manage.py", "rqworker", "control", "crawls", "default")
        self.spawn("manage.py", "rqcron", "crawlhub.cron")
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "daphne did not start"
                time.sleep(0.2)
        time.sleep(2)  # workers registered

    def cookie(self) -> str:
        from django.test import Client

        client = Client()
        client.force_login(_bench_user())
        return f"sessionid={client.cookies['sessionid'].value}"

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.redis.stop()


def percentiles(values: list[float]) -> str:
    values = sorted(values)
    p = lambda q: values[min(len(values) - 1, int(q * len(values)))]  # noqa: E731
    return (
        f"n={len(values)} p50={p(0.5) * 1000:.0f} ms p95={p(0.95) * 1000:.0f} ms "
        f"max={values[-1] * 1000:.0f} ms"
    )


# -- (a) latency ----------------------------------------------------------------------------


async def latency(stack: Stack, cookie: str, *, changes: int, every: float, force: bool) -> list:
    import json

    from crawls.engine import live
    from crawls.engine.frontier import Frontier
    from crawls.models import Crawl, CrawlState

    crawl = Crawl.objects.create(
        name="latency",
        channel_id=_channel(),
        seeds=["x"],
        state=CrawlState.RUNNING,
        created_by=_bench_user(),
    )
    frontier = Frontier(crawl.pk)
    # Running for the page, but with a request no worker may claim: the supervisor neither
    # finishes it (work pending) nor do slices fetch anything.
    frontier.add_seeds(["http://127.0.0.1:9/"])
    frontier.set_state("paused")
    ws = await Socket.open(stack.port, f"/ws/crawls/{crawl.pk}/", cookie)
    await ws.recv()  # the snapshot on connect
    changed: dict[int, float] = {}
    arrived: list[tuple[float, int]] = []

    def publisher() -> None:
        for n in range(1, changes + 1):
            time.sleep(every)
            changed[n] = time.time()
            frontier.redis.hincrby(frontier.key("stats"), "responses", 1)
            live.publish_crawl(crawl.pk, force=force)
        time.sleep(0.6)
        live.publish_crawl(crawl.pk, force=True)  # the last change surely goes out

    thread = threading.Thread(target=publisher)
    thread.start()
    while thread.is_alive() or not arrived or arrived[-1][1] < changes:
        try:
            text = await asyncio.wait_for(ws.recv(), timeout=5)
        except TimeoutError:
            break
        arrived.append((time.time(), json.loads(text)["stats"]["responses"]))
    thread.join()
    ws.close()
    latencies = []
    for n, at in changed.items():
        first = next((t for t, seen in arrived if seen >= n), None)
        if first is not None:
            latencies.append(first - at)
    return latencies


def _bench_user():
    """The signed-in user of the websocket clients; the bench's crawls are theirs (a user's
    crawl page and its websocket are for its owner and staff only)."""
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get_or_create(username="bench")[0]


def _channel() -> int:
    from crawls.models import Channel

    return Channel.default().pk


# -- (b) slowdown ---------------------------------------------------------------------------


async def crawl_once(stack: Stack, cookie: str, origin: str, clients: int) -> tuple:
    from asgiref.sync import sync_to_async

    from crawls import services
    from crawls.models import Crawl

    user = await sync_to_async(_bench_user)()
    crawl = await sync_to_async(services.crawl_create)(
        user=user,
        name=f"bench {clients} clients",
        seeds=[origin + "/"],
        obey_robots=False,
        max_pages=1_000_000,
        max_depth=1000,
        threads=16,
        slices=2,
        max_retries=0,
    )
    sockets = [
        await Socket.open(stack.port, f"/ws/crawls/{crawl.pk}/", cookie) for _ in range(clients)
    ]
    received = [0]

    async def read(ws: Socket) -> None:
        while await ws.recv() is not None:
            received[0] += 1

    readers = [asyncio.ensure_future(read(ws)) for ws in sockets]
    await sync_to_async(services.crawl_start)(crawl=crawl)
    while True:
        await asyncio.sleep(0.2)
        state = await sync_to_async(lambda: Crawl.objects.get(pk=crawl.pk))()
        if state.is_over():
            break
    for reader in readers:
        reader.cancel()
    for ws in sockets:
        ws.close()
    seconds = (state.finished_at - state.started_at).total_seconds()
    return seconds, state.stats["responses"], received[0]


def serve_site(pages: int) -> tuple[subprocess.Popen, str]:
    code = (
        "import sys, time\nfrom crawlhub.sample_site import SampleSite, serve\n"
        "server, origin = serve(SampleSite(pages=int(sys.argv[1]), seed=11))\n"
        "print(origin, flush=True)\ntime.sleep(1e9)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(pages)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    return proc, proc.stdout.readline().strip()


async def main(args) -> None:
    with tempfile.TemporaryDirectory(prefix="crawlhub-live-") as tmp:
        stack = Stack(Path(tmp))
        try:
            stack.start()
            cookie = stack.cookie()
            print(f"# {os.cpu_count()} CPUs; daphne + 2 rqworkers + cron + embedded Redis 6.2")
            if not args.skip_latency:
                lat = await latency(stack, cookie, changes=args.changes, every=0.05, force=False)
                print(
                    f"(a) counter change -> open page, throttled publish as the slicer does "
                    f"(a change every 50 ms): {percentiles(lat)}"
                )
                lat = await latency(stack, cookie, changes=100, every=0.3, force=True)
                print(f"(a) transport only (forced publish, 300 ms apart): {percentiles(lat)}")
            if not args.skip_crawl:
                site, origin = serve_site(args.pages)
                try:
                    runs: dict[int, list[float]] = {0: [], args.clients: []}
                    for _ in range(args.rounds):
                        for clients in (0, args.clients):
                            seconds, pages, msgs = await crawl_once(stack, cookie, origin, clients)
                            runs[clients].append(seconds)
                            print(
                                f"(b) {clients:3d} clients: {pages} pages in {seconds:.2f} s "
                                f"({pages / seconds:.0f} pages/s), {msgs} messages received"
                            )
                    base, loaded = (statistics.mean(runs[0]), statistics.mean(runs[args.clients]))
                    print(
                        f"(b) slowdown with {args.clients} open pages: "
                        f"{(loaded / base - 1) * 100:+.1f} % "
                        f"(mean {base:.2f} s -> {loaded:.2f} s over {args.rounds} rounds)"
                    )
                finally:
                    site.terminate()
        finally:
            stack.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=5000)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--changes", type=int, default=400)
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-crawl", action="store_true")
    asyncio.run(main(parser.parse_args()))
