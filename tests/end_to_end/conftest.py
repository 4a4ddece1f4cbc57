"""Fixtures of the end-to-end tests of `up`: a real `manage.py up` (on the test database and
Redis: crawl_on_up), and a ProcessGroup."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from crawlhub.processes import process_group
from tests.support import processes
from tests.support.crawling import FAST_WORKERS, database_url, use_redis
from tests.support.sites import free_port
from tests.support.up import wait_for_workers

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def start_up(tmp_path):
    """Run `manage.py up` on a free port with a fresh data dir; its output goes to a file. Each
    is stopped after the test (SIGTERM: `up` stops its children), then anything left killed."""
    started = []

    def start(workers: int = 2, **env: str) -> tuple[subprocess.Popen, str, Path]:
        full = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
        full.pop("PROXY_CHECK_URL", None)
        full.update(CRAWLHUB_DATA_DIR=str(tmp_path / "data"), PYTHONUNBUFFERED="1", **env)
        port = free_port()
        log = tmp_path / ("up.log" if not started else f"up-{len(started) + 1}.log")
        up = ["manage.py", "up", "--port", str(port), "--workers", str(workers)]
        with log.open("w") as out:
            proc = processes.spawn(
                [sys.executable, *up], cwd=ROOT, env=full, stdout=out, stderr=subprocess.STDOUT
            )
        started.append(proc)
        return proc, f"http://127.0.0.1:{port}", log

    yield start
    processes.stop_all(started, timeout=60)


@pytest.fixture
def crawl_on_up(start_up, redis_server, tmp_path):
    """Start `up` on the test database with short leases and slices (plus env), and point this
    test's crawlhub (services, RQ, the frontier) at the Redis it started: (proc, base, log,
    redis_url). The test's Redis is the session's again afterwards."""

    def start(**env: str) -> tuple[subprocess.Popen, str, Path, str]:
        proc, base, log = start_up(DATABASE_URL=database_url(), **{**FAST_WORKERS, **env})
        wait_for_workers(base, 2, log)
        url = (tmp_path / "data" / "redis" / "address").read_text().strip()
        use_redis(url)
        return proc, base, log, url

    yield start
    use_redis(redis_server.url)


@pytest.fixture
def group():
    """A ProcessGroup whose children are stopped after the test."""
    made = process_group.ProcessGroup(env=dict(os.environ))
    yield made
    made.stop(timeout=5)
