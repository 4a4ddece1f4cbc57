"""Failover with Redis Sentinel: a primary, a replica and three sentinels (real `redis-server`
processes, passwords on the servers and on the sentinels), a deployment configured through
REDIS_SENTINELS (`./run worker` on a worker machine, `./run up --workers 0` on the web machine:
web server and cron), and a crawl that is mid-way when the primary gets kill -9.

The crawl goes on against the promoted replica and ends with exactly the site's pages, every
counter exact, although the replica missed the primary's last half second of writes (its
link is cut just before the kill, as a lagging replica would). What the failover costs is
printed: how long until the sentinels named the new
master, until this process wrote to it, until the crawl's counters moved again; and how many
pages the site served twice (from its own access log): the work whose completion the primary
acknowledged but had not yet replicated (docs/reliability.md says why that is all it costs).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from crawlhub.redis.connections import REDIS_ERRORS, get_redis
from crawls.engine.frontier import Frontier
from crawls.models import CrawlState
from tests.support import processes
from tests.support.crawling import (
    FAST_WORKERS,
    ROOT,
    assert_exact,
    database_url,
    refetched,
    start_sample_crawl,
    use_redis,
    wait_for_state,
)
from tests.support.sentinel_redis import SentinelRedis, redis_server_binary
from tests.support.sites import free_port

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PAGES = 2500
PAGE_DELAY = 0.02  # 4 threads x 2 slices: the crawl takes a minute or so, the kill lands mid-way
KILL_AT = PAGES // 3
UNREPLICATED_SECONDS = 0.5


@pytest.fixture
def sentinel_redis(tmp_path, redis_server) -> Iterator[SentinelRedis]:
    """The Sentinel-managed Redis; this process uses it during the test (the frontier, RQ, the
    channel layer), and the session's Redis again after."""
    if not redis_server_binary():
        pytest.skip(
            "redis-server is not installed (Debian package redis-server; its binary also runs "
            "the sentinels, with --sentinel): the Sentinel failover test needs it"
        )
    with SentinelRedis(tmp_path / "sentinel") as group:
        use_redis(group.url)
        try:
            yield group
        finally:
            use_redis(redis_server.url)


def deployment_env(tmp_path: Path, name: str, group: SentinelRedis) -> dict[str, str]:
    """A machine's environment: its own data dir, the deployment's database and sentinels."""
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith("REDIS_") and k != "DATABASE_URL"
    }
    return {
        **clean,
        **FAST_WORKERS,
        **group.client_env(),
        "DATABASE_URL": database_url(),
        "CRAWLHUB_DATA_DIR": str(tmp_path / name),
        "PYTHONUNBUFFERED": "1",
    }


def start(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with log.open("w") as out:
        return processes.spawn(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def wait_for_line(log: Path, text: str, proc: subprocess.Popen, *, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text():
        assert proc.poll() is None, f"exited ({proc.returncode}):\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {text!r} in {timeout} s:\n{log.read_text()}"
        time.sleep(0.2)


def responses(crawl_id: int) -> int | None:
    """The crawl's responses counter on the current master; None while there is none."""
    try:
        return Frontier(crawl_id).stats()["responses"]
    except REDIS_ERRORS:
        return None


def wait_until(condition, *, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.05)
    return value


@pytest.mark.timeout(900)
def test_a_crawl_goes_on_through_a_failover_of_its_redis_and_loses_nothing(
    tmp_path, sentinel_redis, user, make_site
):
    group = sentinel_redis
    site, server, crawl = start_sample_crawl(user, make_site, pages=PAGES, delay=PAGE_DELAY)
    web_port = free_port()
    up_log, worker_log = tmp_path / "up.log", tmp_path / "worker.log"
    up = start(
        [sys.executable, "manage.py", "up", "--workers", "0", "--port", str(web_port)],
        deployment_env(tmp_path, "web", group),
        up_log,
    )
    worker = start(
        ["./run", "worker", "--workers", "2"],
        deployment_env(tmp_path, "worker", group),
        worker_log,
    )
    wait_for_line(worker_log, "Joined the deployment", worker)
    assert f"the master 'crawlhub' of the sentinels 127.0.0.1:{group.sentinel_ports[0]}" in (
        worker_log.read_text()
    )
    wait_for_line(up_log, "crawlhub is up at", up)
    assert group.password not in worker_log.read_text() + up_log.read_text()
    assert group.sentinel_password not in worker_log.read_text() + up_log.read_text()

    wait_until(lambda: (responses(crawl.pk) or 0) >= KILL_AT, timeout=300, what="progress")
    before = Frontier(crawl.pk).stats()
    assert before["responses"] < PAGES * 0.8, f"the crawl is nearly over already: {before}"
    # The replica misses the primary's last half second: claims, completions, new links and
    # counters the workers were told were written.
    lost = group.kill_primary(unreplicated=UNREPLICATED_SECONDS)
    killed = time.monotonic()
    assert lost > 0, "the replica had every write: nothing was put to the test"

    group.wait_for_promotion()
    promoted = time.monotonic() - killed
    probe = get_redis()
    wait_until(lambda: _wrote(probe), timeout=120, what="write on the new master")
    wrote = time.monotonic() - killed
    first = wait_until(lambda: responses(crawl.pk), timeout=60, what="read on the new master")
    wait_until(lambda: (responses(crawl.pk) or 0) > first, timeout=180, what="progress")
    resumed = time.monotonic() - killed

    crawl = wait_for_state(crawl, {CrawlState.FINISHED}, timeout=600)
    assert_exact(crawl, site)
    again = refetched(crawl, site, server)
    print(
        f"\nSentinel failover: kill -9 of the primary at {before['responses']} of "
        f"{len(site.expected())} pages, its last {UNREPLICATED_SECONDS} s ({lost} bytes of "
        f"writes) not on the replica; the sentinels named the replica after {promoted:.2f} s, "
        f"this process wrote to it after {wrote:.2f} s, the crawl's counters moved again "
        f"after {resumed:.2f} s; pages fetched twice: {again}"
    )
    # What a failover may fetch again: the pages in the workers' hands, and those whose
    # completion had not reached the replica. Not the whole crawl over again.
    assert 0 <= again < PAGES // 5, again
    assert group.master_port() == group.replica_port
    health = requests.get(f"http://127.0.0.1:{web_port}/healthz", timeout=30).json()
    assert health["redis"]["ok"] and health["workers"]["count"] == 2, health
    # Nothing crashed out: the workers and the web machine's processes rode it out.
    assert worker.poll() is None and up.poll() is None
    processes.stop_all([worker, up], timeout=60)
    assert worker.returncode == 0, worker_log.read_text()[-3000:]


def _wrote(client) -> bool:
    try:
        client.set("test:failover-probe", "1")
    except REDIS_ERRORS:
        return False
    return True


@pytest.mark.timeout(900)
def test_sentinel_settings_that_cannot_work_are_refused_saying_what(tmp_path, sentinel_redis):
    """`./run worker` refuses, in one line, sentinels that name no such master, a wrong
    sentinel password, a wrong server password; no password shown. (Settings that cannot work
    at all: test_sentinel_settings.py.)"""
    good = sentinel_redis.client_env()
    cases = [
        ({**good, "REDIS_SENTINEL_SERVICE": "elsewhere"}, "knows no master named 'elsewhere'"),
        ({**good, "REDIS_SENTINEL_PASSWORD": "wrong"}, "refused the sentinel password"),
        ({**good, "REDIS_URL": "redis://:wrong@/0"}, "refused the credentials in REDIS_URL"),
    ]
    for env, expected in cases:
        full = {**deployment_env(tmp_path, "worker", sentinel_redis), **env}
        result = subprocess.run(
            ["./run", "worker", "--workers", "1"],
            cwd=ROOT,
            env=full,
            capture_output=True,
            text=True,
            timeout=600,
        )
        output = result.stdout + result.stderr
        assert result.returncode != 0, output
        assert expected in output, output
        assert "Traceback" not in output, output
        assert sentinel_redis.password not in output
        assert sentinel_redis.sentinel_password not in output
