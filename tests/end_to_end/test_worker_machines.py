"""`./run worker`, the workers of a machine that joins a deployment, and a Redis secured as a
deployment runs it: TLS only, a password, an ACL user, client certificates.

A real crawl runs through real worker processes against that Redis, the live page follows it
over the channel layer, and the crawl ends with exactly the site's pages. A worker refuses what
it cannot join (a wrong password, no CA, another machine's socket, a database without this
version's migrations) with one line saying what and where; and SIGTERM stops it cleanly, a
slice in progress handing its requests back.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.db import connection
from django.db.migrations.recorder import MigrationRecorder

from crawlhub.asgi import application
from crawlhub.redis import redis_config
from crawls.engine.frontier import Frontier
from crawls.models import CrawlState
from tests.support import processes
from tests.support.clients import WS_CONNECT_SECONDS
from tests.support.crawling import (
    FAST_WORKERS,
    ROOT,
    assert_exact,
    database_url,
    start_sample_crawl,
    use_redis,
    wait_for_state,
)
from tests.support.secured_redis import SecuredRedis

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ORIGIN = "http://127.0.0.1:8000"


def machine_env(tmp_path: Path, **env: str) -> dict[str, str]:
    """The environment of another machine: its own data dir, the deployment's database."""
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith("REDIS_") and k != "DATABASE_URL"
    }
    return {
        **clean,
        **FAST_WORKERS,
        "DATABASE_URL": database_url(),
        "CRAWLHUB_DATA_DIR": str(tmp_path / "machine"),
        "PYTHONUNBUFFERED": "1",
        **env,
    }


def start_worker(env: dict[str, str], log: Path, *args: str) -> subprocess.Popen:
    with log.open("w") as out:
        return processes.spawn(
            ["./run", "worker", *args], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )


def run_worker(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """`./run worker` expected to refuse at once."""
    return subprocess.run(
        ["./run", "worker", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def wait_for_line(
    log: Path, text: str, proc: subprocess.Popen, *, timeout: float = 120, count: int = 1
) -> None:
    """Until `text` is in the worker's log (`count` times)."""
    deadline = time.monotonic() + timeout
    while log.read_text().count(text) < count:
        assert proc.poll() is None, f"worker exited ({proc.returncode}):\n{log.read_text()}"
        assert time.monotonic() < deadline, f"no {text!r} within {timeout} s:\n{log.read_text()}"
        time.sleep(0.2)


@pytest.fixture
def secured_redis(tmp_path, redis_server) -> Iterator[SecuredRedis]:
    """A TLS-only Redis with a password and an ACL user; this process uses it during the test
    (RQ, the frontier, the channel layer), and the session's Redis again after."""
    with SecuredRedis(tmp_path / "secured") as server:
        use_redis(redis_config.client_url(server.url, server.client_env()))
        try:
            yield server
        finally:
            use_redis(redis_server.url)


async def follow_live_page(crawl_id: int, cookies: str, *, timeout: float) -> list[dict]:
    """The crawl page's websocket messages until the crawl is finished."""
    host = urlsplit(ORIGIN).netloc.encode()
    headers = [(b"host", host), (b"origin", ORIGIN.encode()), (b"cookie", cookies.encode())]
    page = WebsocketCommunicator(application, f"/ws/crawls/{crawl_id}/", headers=headers)
    connected, _ = await page.connect(timeout=WS_CONNECT_SECONDS)
    assert connected
    messages: list[dict] = []
    deadline = time.monotonic() + timeout
    try:
        while not messages or messages[-1].get("state") != CrawlState.FINISHED:
            assert time.monotonic() < deadline, f"not finished within {timeout} s: {messages[-1:]}"
            if not await page.receive_nothing(timeout=0.05):
                messages.append(json.loads(await page.receive_from()))
    finally:
        await page.disconnect()
    return messages


def test_workers_crawl_exactly_through_a_tls_redis_with_a_password_and_the_live_page_follows(
    tmp_path, secured_redis, user, user_client, staff_client, make_site
):
    plain = f"redis://127.0.0.1:{secured_redis.port}/0"
    with pytest.raises(redis.ConnectionError):  # plain connections are refused
        redis.Redis.from_url(plain, socket_timeout=5).ping()
    env = machine_env(tmp_path, **secured_redis.client_env())
    log = tmp_path / "worker.log"
    worker = start_worker(env, log, "--workers", "2")
    cron = processes.spawn(
        [sys.executable, "manage.py", "rqcron", "crawlhub.cron"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # Both workers registered with RQ, taking jobs: the crawl's time starts then (a worker's
    # start-up, Django and all, took minutes at a load of 30).
    wait_for_line(log, "joined as RQ worker", worker, timeout=300, count=2)

    site, _, crawl = start_sample_crawl(user, make_site, pages=150, delay=0.002)
    cookies = "; ".join(f"{k}={v.value}" for k, v in user_client.cookies.items())
    try:
        messages = asyncio.run(follow_live_page(crawl.pk, cookies, timeout=180))
    except AssertionError as exc:  # what the workers said, to tell a stuck crawl's cause
        raise AssertionError(f"{exc}\nworkers' log:\n{log.read_text()[-6000:]}") from None
    crawl = wait_for_state(crawl, {CrawlState.FINISHED}, timeout=30)
    assert_exact(crawl, site)
    # The workers' snapshots reached the page through the channel layer on the same Redis; two
    # workers' can arrive in either order, and the page keeps the latest read (its `at`, as
    # crawl_detail.js does): what it shows never goes back.
    shown: list[dict] = []
    for message in messages:
        if message.get("type") != "crawl.stats":
            continue
        at, last = message["at"], shown[-1]["at"] if shown else None
        if not (at and last and at < last):  # one without `at` (Redis unread) shown as it comes
            shown.append(message)
    responses = [m["stats"]["responses"] for m in shown]
    assert len(responses) >= 3 and responses[-1] == crawl.stats["responses"]
    assert responses == sorted(responses)

    # RQ's scheduler, forked by the first worker, holds its locks on the same Redis.
    assert secured_redis.client().exists("rq:scheduler-lock:crawls")
    health = staff_client.get("/healthz").json()
    assert health["redis"]["ok"] and health["workers"]["count"] == 2
    page = staff_client.get("/workers/").content.decode()
    text = log.read_text()
    names = re.findall(r"joined as RQ worker (\S+)", text)
    assert len(names) == 2 and all(name in page for name in names), text
    assert f"Redis: 127.0.0.1:{secured_redis.port} (TLS, user crawler, db 0)<" in page
    assert secured_redis.password not in page
    assert "Joined the deployment" in text and "TLS, user crawler, db 0" in text
    assert "rediss://crawler:****@127.0.0.1" in text and secured_redis.password not in text
    processes.stop(cron)
    processes.stop(worker, timeout=60)
    assert worker.returncode == 0, log.read_text()
    assert "Stopped." in log.read_text()


def test_a_wrong_password_or_a_missing_ca_is_refused_saying_what_and_where(tmp_path, secured_redis):
    good = secured_redis.client_env()
    cases = [
        (
            {**good, "REDIS_URL": good["REDIS_URL"].replace(secured_redis.password, "wrong")},
            "refused the credentials in REDIS_URL",
        ),
        ({**good, "REDIS_CA_FILE": ""}, "set REDIS_CA_FILE to the CA certificate"),
        (
            {**good, "REDIS_CA_FILE": str(secured_redis.files["other_ca"])},
            "its TLS certificate was not trusted",
        ),
        ({**good, "REDIS_CERT_FILE": "", "REDIS_KEY_FILE": ""}, "want a client certificate"),
        ({**good, "REDIS_CA_FILE": str(tmp_path / "nowhere.pem")}, "no such file on this machine"),
        (
            {**good, "REDIS_URL": f"redis://127.0.0.1:{secured_redis.port}/0"},
            "REDIS_CA_FILE is set but REDIS_URL is not a TLS address",
        ),
        (
            {"REDIS_URL": f"redis://127.0.0.1:{secured_redis.port}/0"},
            "as a TLS-only Redis does; use rediss://",
        ),
    ]
    for env, expected in cases:
        result = run_worker(machine_env(tmp_path, **env), "--workers", "1")
        output = result.stdout + result.stderr
        assert result.returncode != 0, output
        assert expected in output, output
        assert f"127.0.0.1:{secured_redis.port}" in output or "REDIS_" in output
        assert "Traceback" not in output and secured_redis.password not in output


def test_a_worker_refuses_another_machines_socket_no_redis_and_an_unmigrated_database(
    tmp_path, redis_server
):
    socket = tmp_path / "elsewhere" / "redis.sock"
    result = run_worker(machine_env(tmp_path, REDIS_URL=f"unix://{socket}"))
    assert result.returncode != 0
    assert f"the unix socket {socket}, which does not exist on this machine" in result.stderr

    result = run_worker(machine_env(tmp_path))
    assert result.returncode != 0 and "REDIS_URL is not set" in result.stderr

    empty = tmp_path / "empty.sqlite3"
    env = machine_env(tmp_path, REDIS_URL=redis_server.url, DATABASE_URL=f"sqlite:///{empty}")
    result = run_worker(env)
    assert result.returncode != 0
    assert f"the database sqlite {empty} lacks" in result.stderr
    assert "./run migrate" in result.stderr and "Traceback" not in result.stderr
    # Refused, not migrated: `./run worker` leaves the deployment's database alone.
    result = run_worker(env)
    assert f"the database sqlite {empty} lacks" in result.stderr

    # A database a newer version migrated: this older checkout must be upgraded first.
    recorder = MigrationRecorder(connection)
    recorder.record_applied("crawls", "9999_from_a_newer_version")
    try:
        result = run_worker(machine_env(tmp_path, REDIS_URL=redis_server.url))
    finally:
        recorder.record_unapplied("crawls", "9999_from_a_newer_version")
    assert result.returncode != 0
    assert "crawls.9999_from_a_newer_version" in result.stderr
    assert "upgrade this machine to the same version" in result.stderr


def test_sigterm_stops_the_workers_and_a_slice_in_progress_hands_its_requests_back(
    tmp_path, redis_server, user, make_site
):
    # 8 pages a second: the site takes a minute, longer than a stop may take.
    site, server, crawl = start_sample_crawl(user, make_site, pages=400, delay=0.5)
    env = machine_env(tmp_path, REDIS_URL=redis_server.url, CRAWLHUB_SLICE_SECONDS="600")
    log = tmp_path / "worker.log"
    worker = start_worker(env, log, "--workers", "1")
    wait_for_line(log, "worker-1 (pid", worker)
    frontier = Frontier(crawl.pk)
    deadline = time.monotonic() + 120
    while frontier.stats()["responses"] < 5 or frontier.stats()["in_flight"] == 0:
        assert time.monotonic() < deadline, f"no slice at work: {frontier.stats()}"
        time.sleep(0.1)
    stopping = time.monotonic()
    processes.stop(worker, timeout=60)
    took = time.monotonic() - stopping
    print(f"stopped in {took:.1f} s")
    assert worker.returncode == 0, log.read_text()
    assert "Stopped." in log.read_text()
    # The slice (600 s of budget) stopped with the worker: the requests it held are queued
    # again at once, not left in the backup for their leases to run out.
    stats = frontier.stats()
    assert stats["in_flight"] == 0 and stats["queued"] > 0, stats
    assert stats["responses"] < len(site.expected()) / 2, stats
    crawl.refresh_from_db()
    assert crawl.state == CrawlState.RUNNING
    assert redis_server.url == settings.REDIS_URL
