"""The sample site served by a process of its own, on another host's address, with an access log.

    python -m tests.support.site_process --pages 20000 --seed 3 --host 10.213.7.1 --port 8080 \\
        --log access.log

Every request is one line of the log, written as it arrives: "<client address> <path>". The
process says "serving" on stdout once it listens. read_log() reads the log back.
"""

from __future__ import annotations

import argparse
import sys
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from crawlhub.sample_site import QuietHTTPServer, SampleSite


def read_log(path: Path) -> list[tuple[str, str]]:
    """(client address, path) of every request served so far."""
    lines = path.read_text(errors="replace").splitlines()
    return [tuple(line.split(" ", 1)) for line in lines if " " in line]  # type: ignore[misc]


def serve(site: SampleSite, *, host: str, port: int, log: Path) -> None:
    out = log.open("a", buffering=1)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True
        wbufsize = 64 * 1024

        def do_GET(self) -> None:
            with lock:
                out.write(f"{self.client_address[0]} {self.path}\n")
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
    options = parser.parse_args()
    site = SampleSite(pages=options.pages, seed=options.seed)
    serve(site, host=options.host, port=options.port, log=options.log)


if __name__ == "__main__":
    sys.exit(main())
