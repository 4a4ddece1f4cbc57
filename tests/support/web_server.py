"""daphne serving crawlhub on a free port, as `up` runs it, for tests that need the real web
server (its process, its threads, its CPU time).

    with web_server(env, log_path) as (daphne, base):   # base: "http://127.0.0.1:<port>"
        requests.get(base + "/healthz")

The process is registered for stopping as it starts (tests.support.processes), and stopped on
the way out even when the start-up fails.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.support import processes
from tests.support.sites import free_port

ROOT = Path(__file__).resolve().parents[2]
# How long daphne may take to come up on a busy machine.
START_SECONDS = 120


@contextlib.contextmanager
def web_server(env: dict[str, str], log_path: Path) -> Iterator[tuple[subprocess.Popen, str]]:
    port = free_port()
    with open(log_path, "w") as log:
        daphne = processes.spawn(
            [
                sys.executable,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(port),
                "crawlhub.asgi:application",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        processes.wait_for_http(
            base + "/healthz", what="daphne", proc=daphne, log=log_path, timeout=START_SECONDS
        )
        yield daphne, base
    finally:
        processes.stop(daphne)
