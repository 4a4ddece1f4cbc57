"""Load: 10 crawls at once on 2 workers, while a signed-in user browses the dashboard.

Starts the whole product with `manage.py up --workers 2` (its own data dir and embedded Redis),
serves ten generated sites on 127.0.0.1, starts one crawl per site, and keeps requesting the
pages a user would look at (crawl list, a crawl's live page and its snapshot, workers, healthz)
until every crawl has ended. Prints page latency (p50 / p95 / max per page) and checks that
every crawl finished with exactly its site's expected URLs.

    .venv/bin/python bench/load.py [--crawls 10] [--pages 1500] [--workers 2]

Target (issue): p95 page time < 300 ms while the crawls run.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from crawlhub.sample_site import SampleSite, serve  # noqa: E402

PASSWORD = "load-bench-password-1"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def manage(env: dict, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True
    )
    if result.returncode != 0:
        raise SystemExit(f"manage.py {' '.join(args)} failed:\n{result.stderr}")
    return result.stdout


def wait_up(base: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            report = requests.get(base + "/healthz", timeout=2).json()
            if report["ok"] and report["workers"]["count"] > 0:
                return
        except (requests.RequestException, ValueError):
            pass
        time.sleep(0.5)
    raise SystemExit("crawlhub did not come up")


def log_in(base: str) -> requests.Session:
    session = requests.Session()
    page = session.get(base + "/login/", timeout=10)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    session.post(
        base + "/login/",
        data={"username": "admin", "password": PASSWORD, "csrfmiddlewaretoken": token},
        headers={"Referer": base + "/login/"},
        timeout=10,
    ).raise_for_status()
    return session


def browse(session: requests.Session, base: str, crawl_ids: list[int], rng) -> tuple[str, float]:
    crawl = rng.choice(crawl_ids)
    name, path = rng.choice(
        [
            ("crawl list", "/"),
            ("crawl page", f"/crawls/{crawl}/"),
            ("snapshot", f"/crawls/{crawl}/snapshot.json"),
            ("workers", "/workers/"),
            ("healthz", "/healthz"),
        ]
    )
    started = time.perf_counter()
    response = session.get(base + path, timeout=30)
    elapsed = time.perf_counter() - started
    if response.status_code != 200:
        raise SystemExit(f"{path} answered {response.status_code}")
    return name, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--crawls", type=int, default=10)
    parser.add_argument("--pages", type=int, default=1500, help="pages per site")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    data_dir = tempfile.mkdtemp(prefix="crawlhub-load-")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env.update(CRAWLHUB_DATA_DIR=data_dir, CRAWLHUB_ADMIN_PASSWORD=PASSWORD)

    sites, servers = [], []
    for n in range(args.crawls):
        site = SampleSite(pages=args.pages, seed=100 + n)
        server, url = serve(site)
        sites.append((site, url))
        servers.append(server)

    up = subprocess.Popen(
        [sys.executable, "manage.py", "up", "--port", str(port), "--workers", str(args.workers)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_up(base)
        session = log_in(base)
        started = time.monotonic()
        crawl_ids = []
        for n, (_, url) in enumerate(sites):
            out = manage(
                env,
                "crawl",
                "create",
                "--name",
                f"load {n}",
                "--seed",
                url + "/",
                "--max-pages",
                "1000000",
                "--max-depth",
                "1000",
                "--no-robots",
                "--threads",
                "4",
                "--slices",
                "1",
                "--start",
            )
            crawl_ids.append(int(out.strip()))
        print(f"{args.crawls} crawls of {args.pages} pages each started on {args.workers} workers")

        rng = random.Random(1)
        samples: dict[str, list[float]] = {}
        ended: dict[int, dict] = {}
        last_check = 0.0
        while len(ended) < len(crawl_ids):
            name, elapsed = browse(session, base, crawl_ids, rng)
            samples.setdefault(name, []).append(elapsed)
            if time.monotonic() - last_check > 2:
                last_check = time.monotonic()
                for crawl_id in crawl_ids:
                    if crawl_id not in ended:
                        url = f"{base}/crawls/{crawl_id}/snapshot.json"
                        snapshot = session.get(url, timeout=30).json()
                        if snapshot["state"] in ("finished", "cancelled", "failed"):
                            ended[crawl_id] = {"state": snapshot["state"], **snapshot["stats"]}
            if time.monotonic() - started > 1800:
                raise SystemExit("crawls did not end within 30 minutes")
            time.sleep(0.05)
        crawl_seconds = time.monotonic() - started
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(120)
        for server in servers:
            server.shutdown()

    every = sorted(t for values in samples.values() for t in values)
    print(f"\nall crawls ended after {crawl_seconds:.1f} s; {len(every)} page requests meanwhile")
    print(f"{'page':<12} {'n':>6} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}")
    for name, values in sorted(samples.items()) + [("ALL", every)]:
        values = sorted(values)
        p95 = values[int(0.95 * (len(values) - 1))]
        print(
            f"{name:<12} {len(values):>6} {statistics.median(values) * 1000:>8.1f}"
            f" {p95 * 1000:>8.1f} {values[-1] * 1000:>8.1f}"
        )
    wrong = 0
    for crawl_id, (site, _) in zip(crawl_ids, sites, strict=True):
        status, expected = ended[crawl_id], len(site.expected())
        ok = status["state"] == "finished" and status["requests"] == expected
        ok = ok and status["responses"] + status["errors"] == expected
        wrong += not ok
        if not ok:
            print(f"crawl {crawl_id}: {status['state']}, {status['requests']} of {expected}")
    print(f"\n{len(crawl_ids) - wrong} of {len(crawl_ids)} crawls finished with exactly their URLs")


if __name__ == "__main__":
    main()
