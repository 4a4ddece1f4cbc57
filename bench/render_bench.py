"""Rendering benchmark: pages per second of a crawl that renders JavaScript, against the same
site crawled without rendering, in the same run, on real RQ workers.

    .venv/bin/python bench/render_bench.py                  # 300 pages, 2 workers
    .venv/bin/python bench/render_bench.py --pages 600 --workers 2 --threads 8

The site (served here, on loopback) has links in its HTML, so both crawls reach every page;
each page also runs a script that asks the site's JSON API (fetch) for its text and writes it
into the DOM, as a single-page app does. crawlhub runs as `manage.py up --workers N` with its
own embedded Redis and data folder; each crawl is created, started and waited for with
manage.py. Prints, per mode: pages, seconds from start to end (the crawl's own times), pages/s,
and the rendered / plain ratio. The browser processes are the workers' own (Chromium found as
the crawls find it: CRAWLHUB_CHROMIUM, Playwright's install, or chromium on PATH).
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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import redis

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))

from crawlhub.processes.launcher import EmbeddedRedis, spawn, stop_process  # noqa: E402

SHELL = """<!doctype html><html><head><title>Page {n}</title></head><body>
<h1>Page {n}</h1><main id=app>loading</main><nav>{links}</nav>
<script>fetch('/api/{n}').then(r => r.json()).then(d => {{
  document.getElementById('app').innerHTML = '<p class=text>' + d.text + '</p>';
}});</script></body></html>"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def serve(pages: int) -> ThreadingHTTPServer:
    """The site: / links to every page; each page links to the next few; /api/N is JSON."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            path = self.path
            body, kind = None, "text/html; charset=utf-8"
            if path == "/":
                links = "".join(f'<a href="/p/{n}">{n}</a> ' for n in range(pages))
                body = SHELL.format(n="home", links=links).replace("/api/home", "/api/0")
            elif path.startswith("/p/") and path[3:].isdigit() and int(path[3:]) < pages:
                n = int(path[3:])
                links = "".join(f'<a href="/p/{(n + k) % pages}">next</a> ' for k in (1, 2))
                body = SHELL.format(n=n, links=links)
            elif path.startswith("/api/") and path[5:].isdigit():
                body, kind = json.dumps({"text": f"text of page {path[5:]}"}), "application/json"
            data = (body or "not found").encode()
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def wait_until(check, *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)


def run(args) -> list[dict]:
    server = serve(args.pages)
    seed = f"http://127.0.0.1:{server.server_address[1]}/"
    results = []
    with tempfile.TemporaryDirectory(prefix="render-bench-") as tmp:
        folder = Path(tmp)
        with EmbeddedRedis(folder / "redis", port=free_port()) as redis_server:
            env = {
                **os.environ,
                "CRAWLHUB_DATA_DIR": str(folder / "data"),
                "REDIS_URL": redis_server.url,
                "CRAWLHUB_ADMIN_PASSWORD": secrets.token_urlsafe(16),
                "CRAWLHUB_BLOCK_PRIVATE_NETWORKS": "0",
            }
            (folder / "data").mkdir()
            manage = [sys.executable, str(ROOT / "manage.py")]
            client = redis.Redis.from_url(redis_server.url)
            log = open(folder / "up.log", "wb")  # noqa: SIM115
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
                    timeout=120,
                    what=f"{args.workers} RQ workers",
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

                for mode in ("plain", "rendered"):
                    render = (
                        "--render-javascript" if mode == "rendered" else "--no-render-javascript"
                    )
                    say(
                        f"{mode}: {args.pages + 1} pages, {args.workers} workers, "
                        f"{args.threads} threads x {args.slices} slices"
                    )
                    crawl = manage_py(
                        "crawl",
                        "create",
                        "--name",
                        f"render-bench-{mode}",
                        "--seed",
                        seed,
                        "--max-pages",
                        str(args.pages + 10),
                        "--max-depth",
                        "10",
                        "--threads",
                        str(args.threads),
                        "--slices",
                        str(args.slices),
                        "--no-robots",
                        "--max-retries",
                        "2",
                        render,
                        "--start",
                    ).split()[-1]
                    manage_py(
                        "crawl",
                        "wait",
                        crawl,
                        "--timeout",
                        str(args.timeout),
                        timeout=args.timeout + 60,
                    )
                    status = json.loads(manage_py("crawl", "status", crawl, "--json"))
                    counters = status.get("counters", status)
                    seconds = status.get("seconds") or 0.0
                    responses = counters.get("responses", 0)
                    results.append(
                        {
                            "mode": mode,
                            "pages": responses,
                            "errors": counters.get("errors", 0),
                            "seconds": seconds,
                            "pages_per_second": round(responses / seconds, 2) if seconds else 0.0,
                        }
                    )
            finally:
                stop_process(up, timeout=60)
                log.close()
                client.close()
    server.shutdown()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--slices", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args()
    results = run(args)
    print(f"{'mode':<10}{'pages':>7}{'errors':>8}{'seconds':>10}{'pages/s':>10}")
    for r in results:
        print(
            f"{r['mode']:<10}{r['pages']:>7}{r['errors']:>8}{r['seconds']:>10}"
            f"{r['pages_per_second']:>10}"
        )
    plain, rendered = results[0]["pages_per_second"], results[1]["pages_per_second"]
    if plain:
        print(f"rendered / plain: {rendered / plain:.3f}")


if __name__ == "__main__":
    main()
