"""What extraction rules that run away cost the web server and a worker: time, CPU and peak memory.

    .venv/bin/python bench/runaway_rules.py                    # every case
    .venv/bin/python bench/runaway_rules.py --only web --depth 8 --max-seconds 300

Everything real and on loopback, in a temp dir: an embedded Redis, SQLite, daphne serving
crawlhub.asgi, one `manage.py rqworker` and the cron supervisor, and a local site. It uses
only the doors (the API, the preview, services.crawl_create), so that it runs on older code
too, for figures before and after.

- web, save: POST /api/crawls/ with a JMESPath rule of `--depth` tenfold levels
  (`[@,@,@,@,@,@,@,@,@,@][]` joined by `|`; 8 levels are 191 characters). Time of the answer,
  daphne's CPU and its peak RSS (VmHWM).
- web, preview: the rules preview of a cubic XPath on a page of 20,000 <p>: time of the answer
  (or of the client's timeout), daphne's CPU while it ran and in the 10 s after it.
- worker: a crawl of one JSON page with the tenfold rule, then one of the 20,000-<p> page with
  `p ~ p ~ p`: the time from start to finished, and the peak RSS of the worker's work horse and
  of any rule process (sampled every 0.1 s, their VmHWM). Past `--max-seconds` a crawl is
  reported as not finished and the processes are stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LEVEL = "[" + ",".join(["@"] * 10) + "][]"
CUBIC_XPATH = "//p[count(//p[count(preceding::p) < 3]) > 0]"
PARAGRAPHS = (
    b"<html><head><title>Big</title></head><body><h1>Heading</h1>"
    + (b"<p>x</p>" * 20_000)
    + b"</body></html>"
)
PAGES = {"/data.json": (b'{"a": 1}', "application/json"), "/big": (PARAGRAPHS, "text/html")}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serve_site() -> str:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            body, content_type = PAGES.get(self.path, (b"not found", "text/plain"))
            self.send_response(200 if self.path in PAGES else 404)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def peak_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class Stack:
    def __init__(self, tmp: Path) -> None:
        from crawlhub.processes import launcher

        self.tmp = tmp
        self.redis = launcher.EmbeddedRedis(tmp / "redis", port=free_port())
        self.redis.start()
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "CRAWLHUB_DATA_DIR": str(tmp),
            "DATABASE_URL": f"sqlite:///{tmp}/bench.sqlite3",
            "REDIS_URL": self.redis.url,
            "CRAWLHUB_SLICE_SECONDS": "5",
            "CRAWLHUB_SUPERVISOR_SECONDS": "1",
            "LOG_LEVEL": "WARNING",
        }
        os.environ.update(self.env)
        os.environ["DJANGO_SETTINGS_MODULE"] = "crawlhub.settings"
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        self.procs: list[subprocess.Popen] = []

    def spawn(self, *args: str) -> subprocess.Popen:
        log = open(self.tmp / f"{args[-1].replace('/', '_')}.log", "a")  # noqa: SIM115
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

    def start_web(self) -> psutil.Process:
        daphne = self.spawn(
            "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port), "crawlhub.asgi:application"
        )
        deadline = time.monotonic() + 120
        while True:
            try:
                requests.get(self.base + "/healthz", timeout=5)
                return psutil.Process(daphne.pid)
            except requests.RequestException:
                assert time.monotonic() < deadline, "daphne did not start"
                time.sleep(0.3)

    def start_worker(self) -> psutil.Process:
        worker = self.spawn("manage.py", "rqworker", "control", "crawls", "default")
        self.spawn("manage.py", "rqcron", "crawlhub.cron")
        return psutil.Process(worker.pid)

    def stop_processes(self) -> None:
        """Kill what was started (a daphne or a work horse may still be busy on old code)."""
        for proc in self.procs:
            for child in psutil.Process(proc.pid).children(recursive=True):
                child.kill()
            proc.kill()
            proc.wait()
        self.procs.clear()

    def stop(self) -> None:
        self.stop_processes()
        self.redis.stop()


def user_and_token() -> tuple[object, str]:
    from django.contrib.auth import get_user_model

    from crawlhub import tokens

    user = get_user_model().objects.create_user(username="bench", password="bench-pass-123")
    return user, tokens.token_create(user=user, name="bench")[1]


def web(stack: Stack, depth: int, max_seconds: float) -> None:
    daphne = stack.start_web()
    _, token = user_and_token()
    expr = "|".join([LEVEL] * depth)
    body = {
        "name": "tenfold",
        "seeds": ["http://127.0.0.1:9/"],
        "extract_rules": [{"name": "tenfold", "kind": "json", "expr": expr}],
    }
    before, started = cpu(daphne), time.monotonic()
    try:
        answer = requests.post(
            stack.base + "/api/crawls/",
            json=body,
            timeout=max_seconds,
            headers={"Authorization": f"Bearer {token}"},
        ).status_code
    except requests.ReadTimeout:
        answer = f"no answer within {max_seconds:.0f} s"
    print(
        f"web, save ({depth} levels, {len(expr)} characters): {answer} after "
        f"{time.monotonic() - started:.2f} s, daphne {cpu(daphne) - before:.2f} s CPU, "
        f"peak {peak_mb(daphne.pid):.0f} MB"
    )
    stack.stop_processes()
    preview(stack, max_seconds)
    stack.stop_processes()


def preview(stack: Stack, max_seconds: float) -> None:
    daphne = stack.start_web()
    site = serve_site()
    session = requests.Session()
    session.get(stack.base + "/login/", timeout=60)
    session.post(
        stack.base + "/login/",
        data={"username": "bench", "password": "bench-pass-123"},
        headers={"X-CSRFToken": session.cookies["csrftoken"]},
        timeout=60,
    )
    rules = [{"name": "cubic", "kind": "xpath", "expr": CUBIC_XPATH}]
    data = {"preview_url": site + "/big", "extract_rules": json.dumps(rules), "timeout": "10"}
    before, started = cpu(daphne), time.monotonic()
    try:
        answer = session.post(
            stack.base + "/crawls/preview/",
            data=data,
            timeout=max_seconds,
            headers={"X-CSRFToken": session.cookies["csrftoken"], "Accept": "application/json"},
        ).json()["field_errors"]
    except requests.ReadTimeout:
        answer = f"no answer within {max_seconds:.0f} s (the client gives up)"
    took, during = time.monotonic() - started, cpu(daphne) - before
    after = cpu(daphne)
    time.sleep(10)
    print(
        f"web, preview (cubic XPath, 20,000 <p>): {answer} after {took:.1f} s; daphne "
        f"{during:.2f} s CPU meanwhile, {cpu(daphne) - after:.2f} s in the 10 s after; peak "
        f"{peak_mb(daphne.pid):.0f} MB"
    )


def worker(stack: Stack, depth: int, max_seconds: float) -> None:
    from django.contrib.auth import get_user_model

    from crawls import services
    from crawls.models import Crawl

    user = get_user_model().objects.get_or_create(username="bench")[0]
    site = serve_site()
    cases = [
        (
            f"tenfold JMESPath, {depth} levels",
            "/data.json",
            {"name": "tenfold", "kind": "json", "expr": "|".join([LEVEL] * depth)},
        ),
        (
            "p ~ p ~ p on 20,000 <p>",
            "/big",
            {"name": "siblings", "kind": "css", "expr": "p ~ p ~ p", "many": True},
        ),
    ]
    for label, path, rule in cases:
        worker = stack.start_worker()
        time.sleep(5)  # it registers
        crawl = services.crawl_create(
            user=user,
            name=label,
            seeds=[site + path],
            obey_robots=False,
            threads=1,
            max_retries=0,
            extract_rules=[rule],
        )
        services.crawl_start(crawl=crawl, user=user)
        started, peaks = time.monotonic(), {"horse": 0.0, "rules": 0.0}
        while time.monotonic() - started < max_seconds:
            for child in worker.children(recursive=True):
                try:
                    kind = "rules" if "rule_process" in " ".join(child.cmdline()) else "horse"
                except psutil.Error:
                    continue  # it just ended
                peaks[kind] = max(peaks[kind], peak_mb(child.pid))
            crawl.refresh_from_db()
            if crawl.state == "finished":
                break
            time.sleep(0.1)
        took = time.monotonic() - started
        page = crawl.pages.first()
        outcome = page.extract_errors if page else f"no page; {crawl.error or 'no error'}"
        state = crawl.state if crawl.state == "finished" else f"{crawl.state} (not finished)"
        print(
            f"worker, {label}: {state} after {took:.1f} s; work horse peak {peaks['horse']:.0f}"
            f" MB, rule process peak {peaks['rules']:.0f} MB; {outcome}"
        )
        if crawl.state in ("running", "paused"):
            services.crawl_cancel(crawl=Crawl.objects.get(pk=crawl.pk), user=user)
        stack.stop_processes()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=["web", "worker"])
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--max-seconds", type=float, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="runaway-rules-") as tmp:
        stack = Stack(Path(tmp))
        try:
            if args.only in (None, "web"):
                web(stack, args.depth, args.max_seconds)
            if args.only in (None, "worker"):
                worker(stack, args.depth, args.max_seconds)
        finally:
            stack.stop()


if __name__ == "__main__":
    main()
