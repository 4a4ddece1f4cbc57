"""The sample site served by a process of its own, on another host's address, with an access log.

    python -m tests.support.site_process --pages 20000 --seed 3 --host 10.213.7.1 --port 8080 \\
        --log access.log [--hold FILE --hold-seconds 1.5]

Every request is one line of the log, written as it arrives: "<client address> <path>". The
process says "serving" on stdout once it listens. read_log() reads the log back.

With --hold, each answer waits --hold-seconds first while FILE exists: a test paces a crawl
through what it does meanwhile (a crawl that must last through a machine's death and an outage
needs no more pages than that pace gives), and lets it run at full speed again by removing it.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from crawlhub.sample_site import QuietHTTPServer, SampleSite


def read_log(path: Path) -> list[tuple[str, str]]:
    """(client address, path) of every request served so far."""
    lines = path.read_text(errors="replace").splitlines()
    return [tuple(line.split(" ", 1)) for line in lines if " " in line]  # type: ignore[misc]


def serve(
    site: SampleSite,
    *,
    host: str,
    port: int,
    log: Path,
    hold: Path | None = None,
    hold_seconds: float = 0.0,
) -> None:
    out = log.open("a", buffering=1)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True
        wbufsize = 64 * 1024

        def do_GET(self) -> None:
            with lock:
                out.write(f"{self.client_address[0]} {self.path}\n")
            if hold is not None and hold.exists():
                time.sleep(hold_seconds)
            status, headers, body = site.render(self.path)
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = QuietHTTPServer((host, port), Handler)
    server.daemon_threads = True
    print("serving", flush=True)
    server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--hold", type=Path, help="while this file exists, answers wait")
    parser.add_argument("--hold-seconds", type=float, default=1.0)
    options = parser.parse_args()
    site = SampleSite(pages=options.pages, seed=options.seed)
    serve(
        site,
        host=options.host,
        port=options.port,
        log=options.log,
        hold=options.hold,
        hold_seconds=options.hold_seconds,
    )


if __name__ == "__main__":
    sys.exit(main())
