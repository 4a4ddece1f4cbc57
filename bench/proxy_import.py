"""A 100,000-line proxy import and the removal of every proxy it added, on the real product.

Starts `manage.py up --workers 2` (its own data dir: SQLite and an embedded Redis), logs in as
the admin, pastes the list on the Import page and times the answer, follows the import to its
end, then removes every proxy through the API and times that. Meanwhile it creates and starts
a small crawl every few seconds (the API), and at the end looks through the log of every
process for "database is locked".

    .venv/bin/python bench/proxy_import.py [--lines 100000] [--workers 2]

The list: one bad line per 100 (a port out of range) and one repeated line per 100, the rest
distinct addresses in 198.18.0.0/15 (a benchmarking network: validation finds nobody there).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from crawlhub.sample_site import SampleSite, serve  # noqa: E402

PASSWORD = "import-bench-password-1"
JOB_PATH = re.compile(r"/proxies/jobs/(\d+)/")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def proxy_list(lines: int) -> tuple[str, dict]:
    out, expected = [], {"added": 0, "duplicates": 0, "errors": 0}
    for n in range(lines):
        if n % 100 == 50:
            out.append(f"198.18.0.1:{70000 + n}")
            expected["errors"] += 1
        elif n % 100 == 99:
            out.append(out[n - 1])
            expected["duplicates"] += 1
        else:
            out.append(f"198.{18 + n // 65536}.{n // 256 % 256}.{n % 256}:8080")
            expected["added"] += 1
    return "\n".join(out) + "\n", expected


def wait_up(base: str, timeout: float = 120) -> None:
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
    session.headers["X-CSRFToken"] = session.cookies["csrftoken"]
    return session


def form_token(session: requests.Session, url: str) -> str:
    page = session.get(url, timeout=60)
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)


def follow_job(session: requests.Session, base: str, status_url: str, what: str) -> dict:
    """Poll a job's status until it ends; print its progress now and then."""
    shown = 0.0
    while True:
        status = session.get(status_url, timeout=60).json()
        if status["state"] in ("done", "failed"):
            return status
        if time.monotonic() - shown > 10:
            shown = time.monotonic()
            print(f"  {what}: {status['done']:,} of {status['total'] or 0:,}")
        time.sleep(0.5)


class CrawlStarter(threading.Thread):
    """Create and start a small crawl every few seconds while the import and removal run."""

    def __init__(self, session: requests.Session, base: str, seed: str) -> None:
        super().__init__(daemon=True)
        self.session, self.base, self.seed = session, base, seed
        self.stop = threading.Event()
        self.answers: list[tuple[int, float]] = []

    def run(self) -> None:
        n = 0
        while not self.stop.wait(3):
            n += 1
            started = time.perf_counter()
            try:
                response = self.session.post(
                    self.base + "/api/crawls/",
                    json={"name": f"side {n}", "seeds": [self.seed], "start": True},
                    timeout=600,
                )
                code = response.status_code
            except requests.RequestException:
                code = 0
            self.answers.append((code, time.perf_counter() - started))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    data_dir = Path(tempfile.mkdtemp(prefix="crawlhub-import-"))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env.update(CRAWLHUB_DATA_DIR=str(data_dir), CRAWLHUB_ADMIN_PASSWORD=PASSWORD)
    text, expected = proxy_list(args.lines)
    site_server, site_url = serve(SampleSite(pages=20))

    log_path = data_dir / "up.log"
    with open(log_path, "w") as log:
        up = subprocess.Popen(
            [
                sys.executable,
                "manage.py",
                "up",
                "--port",
                str(port),
                "--workers",
                str(args.workers),
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_up(base)
        session = log_in(base)
        starter = CrawlStarter(log_in(base), base, site_url + "/")
        starter.start()

        token = form_token(session, base + "/proxies/import")
        started = time.perf_counter()
        page = session.post(
            base + "/proxies/import",
            data={"text": text, "csrfmiddlewaretoken": token},
            headers={"Referer": base + "/proxies/import"},
            timeout=1800,
        )
        answered = time.perf_counter() - started
        page.raise_for_status()
        job = JOB_PATH.search(page.url)
        if job:  # the import goes on in the background
            status_url = f"{base}/proxies/jobs/{job[1]}.json"
            status = follow_job(session, base, status_url, "imported")
            imported = time.perf_counter() - started
            report = session.get(status_url + "?report=1", timeout=60).json()["report"]
            counts = {k: status["counts"][k] for k in expected}
        else:  # the page answered with the report itself
            found = re.search(
                r"(\d+) added .*?, (\d+) duplicates, (\d+) bad lines", page.text, re.S
            )
            counts = dict(zip(expected, map(int, found.groups()), strict=True))
            report = None
            imported = time.perf_counter() - started
        print(
            f"import of {args.lines:,} lines: the page answered in {answered:.2f} s, "
            f"the import ended after {imported:.1f} s"
        )
        print(f"  report: {counts} (expected {expected})")
        if report and report.get("errors"):
            first = report["errors"][0]
            print(f"  first bad line: line {first['line']}: {first['reason']}: {first['text']}")

        ids = [
            int(i)
            for i in subprocess.run(
                [
                    sys.executable,
                    "manage.py",
                    "shell",
                    "-v",
                    "0",
                    "-c",
                    "from proxies.models import Proxy; "
                    "print(*Proxy.objects.values_list('pk', flat=True))",
                ],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
        ]
        started = time.perf_counter()
        answer = session.post(
            base + "/api/proxies/remove/", json={"ids": ids, "why": "bench"}, timeout=1800
        )
        remove_answered = time.perf_counter() - started
        if answer.status_code == 202:
            status = follow_job(session, base, answer.json()["status_url"], "removed")
            removed = status["counts"]["removed"]
        else:
            answer.raise_for_status()
            removed = len(answer.json()["removed"])
        removal = time.perf_counter() - started
        print(
            f"removal of {len(ids):,} proxies: the API answered in {remove_answered:.2f} s "
            f"({answer.status_code}), {removed:,} removed after {removal:.1f} s"
        )
        starter.stop.set()
        starter.join(timeout=600)
        codes = [code for code, _ in starter.answers]
        slowest = max((t for _, t in starter.answers), default=0)
        print(
            f"crawls created meanwhile: {len(codes)}, answers {sorted(set(codes))}, "
            f"slowest {slowest:.2f} s"
        )
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(120)
        except subprocess.TimeoutExpired:
            up.kill()
        site_server.shutdown()
    locked = [line for line in log_path.read_text().splitlines() if "database is locked" in line]
    print(f'"database is locked" in the logs: {len(locked)} times')
    for line in locked[:5]:
        print("  " + line[:200])
    print(f"(logs: {log_path})")


if __name__ == "__main__":
    main()
