"""Three machines on one switch, one of which dies and one of which drops off the network, in
the middle of a crawl.

The machines are Linux network namespaces (tests.support.netns) on a /24 of the test's own:
- host A runs what `./run up` runs on a deployment's main machine, minus workers: PostgreSQL
  (a private cluster listening on A's address), a Redis with TLS, a password and an ACL user,
  the web server and the supervisor (`./run up --workers 0`), and the site to crawl;
- hosts B and C run `./run worker`, pointed at A by REDIS_URL, DATABASE_URL and SECRET_KEY.
This process is one more machine on the switch: it logs in over HTTP, follows the crawl's live
page over a websocket to A's web server, and reads A's Redis and database.

The database is always PostgreSQL on host A, whatever DATABASE_URL the test run has: a SQLite
file would be shared by the hosts through the filesystem they have in common, not over their
network, so losing C's link would not cut C off from it as it cuts off a real machine. The test
does not depend on the run's database, hence `once` (CI runs it in the SQLite pass).

During the crawl: every process of B is killed at once (kill -9, a machine losing its power),
B's work comes back when its leases expire, and B is started again; then C's cable is pulled
at the switch for 30 s and plugged back. The crawl ends with exactly the site's pages, every
counter exact, nothing in flight, and the live page kept receiving snapshots throughout.
Recovery times are printed (run with -s to see them).

The crawl has to last through all that, whatever the machine's speed: from B's death until C
is back and fetching, the site answers every request HOLD_SECONDS late (site_process --hold),
so the crawl goes on at a known pace however long the machines take to come back, and a site
of PAGES is enough; then it ends at full speed. (It was a 20,000-page site at full speed, sized
for a quiet machine: most of those pages, and of the test's time on a busy one, came after the
last outage. bench/crawl_bench.py measures crawls of 20,000 and 100,000 pages.)
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
import requests

from crawlhub.sample_site import SampleSite
from crawls.engine.frontier import Frontier
from crawls.engine.request import canonicalize
from tests.support import netns, private_postgres, processes
from tests.support.crawling import ROOT
from tests.support.live_socket import LiveSocket
from tests.support.private_postgres import PrivatePostgres
from tests.support.secured_redis import SecuredRedis
from tests.support.site_process import read_log

pytestmark = [pytest.mark.slow, pytest.mark.once, pytest.mark.timeout(1800)]

PAGES = 5_000
# While held: at most slices x threads (32) requests every 2 s, 16 pages/s; the ~4,800 pages
# left after the first tenth last five minutes of restarts and outages at that pace.
HOLD_SECONDS = 2.0
SEED = 3
WORKERS_PER_HOST = 2
OUTAGE_SECONDS = 30
LEASE_SECONDS = 10
WEB_PORT, SITE_PORT = 8000, 8080
ADMIN, ADMIN_PASSWORD = "admin", secrets.token_urlsafe(12)


@dataclass
class Deployment:
    net: netns.Network
    redis: SecuredRedis
    postgres: PrivatePostgres
    env: dict[str, str]  # what every host is given (each adds its own data dir)
    folder: Path
    site_log: Path
    hold: Path  # while it exists, the site answers HOLD_SECONDS late

    @property
    def web(self) -> str:
        return f"http://{self.net['a'].address}:{WEB_PORT}"

    @property
    def site(self) -> str:
        return f"http://{self.net['a'].address}:{SITE_PORT}"

    def host_env(self, name: str, **extra: str) -> dict[str, str]:
        return {**self.env, "CRAWLHUB_DATA_DIR": str(self.folder / name), **extra}

    def start_workers(self, name: str) -> tuple[subprocess.Popen, Path]:
        """`./run worker` on host `name`, once its workers have started."""
        log = self.folder / f"worker-{name}-{time.monotonic_ns()}.log"
        with log.open("w") as out:
            proc = self.net[name].spawn(
                ["./run", "worker", "--workers", str(WORKERS_PER_HOST)],
                cwd=ROOT,
                env=self.host_env(name),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        wait_until(
            lambda: f"worker-{WORKERS_PER_HOST} (pid" in log.read_text(),
            f"{WORKERS_PER_HOST} workers on host {name}",
            timeout=180,
            proc=proc,
            log=log,
        )
        return proc, log

    def manage(self, *args: str) -> str:
        """A management command run on host A, as its operator would; its stdout."""
        result = processes.run(
            ["ip", "netns", "exec", self.net["a"].namespace, "./run", *args],
            cwd=ROOT,
            env=self.host_env("a"),
            timeout=180,
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, f"./run {' '.join(args)}: {result.stdout}{result.stderr}"
        return result.stdout


def wait_until(
    condition: Callable[[], object],
    what: str,
    *,
    timeout: float,
    proc: subprocess.Popen | None = None,
    log: Path | None = None,
) -> float:
    """Poll until condition() is true; returns when (time.monotonic())."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log else ""
            raise AssertionError(f"exited ({proc.returncode}) before {what}:\n{tail}")
        assert time.monotonic() < deadline, f"no {what} within {timeout:.0f} s"
        time.sleep(0.1)
    return time.monotonic()


def wait_for_port(host: str, port: int, what: str, proc: subprocess.Popen, log: Path) -> None:
    def listening() -> bool:
        try:
            socket.create_connection((host, port), timeout=2).close()
            return True
        except OSError:
            return False

    wait_until(listening, what, timeout=120, proc=proc, log=log)


@pytest.fixture
def deployment(tmp_path) -> Iterator[Deployment]:
    reason = netns.unavailable() or private_postgres.unavailable()
    if reason:
        pytest.skip(reason)
    with netns.Network(["a", "b", "c"]) as net:
        a = net["a"]
        launch_on_a = ["ip", "netns", "exec", a.namespace]
        with (
            SecuredRedis(tmp_path / "redis", host=a.address, launch=launch_on_a) as redis_server,
            PrivatePostgres(host=a.address, launch=launch_on_a) as postgres,
        ):
            clean = {
                k: v
                for k, v in os.environ.items()
                if not k.startswith("REDIS_") and k != "DATABASE_URL"
            }
            env = {
                **clean,
                **redis_server.client_env(),
                "DATABASE_URL": postgres.url,
                "SECRET_KEY": secrets.token_urlsafe(40),
                "PYTHONUNBUFFERED": "1",
                "CRAWLHUB_LEASE_SECONDS": str(LEASE_SECONDS),
                "CRAWLHUB_SLICE_SECONDS": "5",
                "CRAWLHUB_SUPERVISOR_SECONDS": "1",
            }
            site_log = tmp_path / "site-access.log"
            site_log.touch()
            hold = tmp_path / "hold"
            deployment = Deployment(net, redis_server, postgres, env, tmp_path, site_log, hold)
            site = a.spawn(
                [
                    sys.executable,
                    "-m",
                    "tests.support.site_process",
                    "--pages",
                    str(PAGES),
                    "--seed",
                    str(SEED),
                    "--host",
                    a.address,
                    "--port",
                    str(SITE_PORT),
                    "--log",
                    str(site_log),
                    "--hold",
                    str(hold),
                    "--hold-seconds",
                    str(HOLD_SECONDS),
                ],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
            )
            up_log = tmp_path / "up-a.log"
            with up_log.open("w") as out:
                up = a.spawn(
                    ["./run", "up", "--host", a.address, "--port", str(WEB_PORT), "--workers", "0"],
                    cwd=ROOT,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=deployment.host_env(
                        "a",
                        ALLOWED_HOSTS=a.address,
                        CRAWLHUB_ADMIN_USER=ADMIN,
                        CRAWLHUB_ADMIN_PASSWORD=ADMIN_PASSWORD,
                    ),
                )
            wait_for_port(a.address, SITE_PORT, "the site on host A", site, site_log)
            wait_until(
                lambda: "crawlhub is up at" in up_log.read_text(),
                "web server on A",
                timeout=240,
                proc=up,
                log=up_log,
            )
            try:
                yield deployment
            finally:
                processes.stop_all(
                    [p for host in net.hosts.values() for p in host.started], timeout=45
                )


def log_in(web: str) -> str:
    """Log in through the login form like a browser; the session cookie."""
    session = requests.Session()
    form = session.get(f"{web}/login/", timeout=30).text
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)[1]
    answer = session.post(
        f"{web}/login/",
        timeout=30,
        allow_redirects=False,
        data={"username": ADMIN, "password": ADMIN_PASSWORD, "csrfmiddlewaretoken": token},
    )
    assert answer.status_code == 302, answer.text[:500]
    return f"sessionid={session.cookies['sessionid']}"


def leases(frontier: Frontier) -> dict[bytes, float]:
    return dict(frontier.redis.zrange(frontier.key("leases"), 0, -1, withscores=True))


def fetches_from(log: Path, address: str) -> int:
    return sum(1 for client, _ in read_log(log) if client == address)


def responses_in(messages: list[tuple[float, dict]], start: float, end: float) -> list[int]:
    return [
        m["stats"]["responses"]
        for at, m in messages
        if start <= at <= end and m.get("type") == "crawl.stats"
    ]


def say(line: str) -> None:
    """A figure as soon as it is measured (shown with -s, and in a failure's report)."""
    print(line, flush=True)


RETRIED = re.compile(r"^([\d,]+) requests? failed, tried again later: (.*)$", re.S)


def logged_retries(db, crawl_id: int, *, but: str) -> tuple[int, int]:
    """(requests the crawl's log says were tried again for a reason other than `but`, lines
    of its log removed or left out): from its "N requests failed, tried again later" lines."""
    rows = db.execute(
        "SELECT detail FROM crawls_crawlevent WHERE crawl_id = %s", [crawl_id]
    ).fetchall()
    retried = 0
    for (detail,) in rows:
        if (found := RETRIED.match(detail)) and not found[2].startswith(but):
            retried += int(found[1].replace(",", ""))
    left_out = sum(int(n) for (d,) in rows for n in re.findall(r"([\d,]+) more lines? of", d))
    (removed,) = db.execute(
        "SELECT log_removed FROM crawls_crawl WHERE id = %s", [crawl_id]
    ).fetchone()
    return retried, removed + left_out


def test_a_crawl_survives_a_dead_machine_and_a_lost_network_and_ends_exactly(deployment):
    net, site = deployment.net, SampleSite(pages=PAGES, seed=SEED)
    b, c = net["b"], net["c"]
    deployment.start_workers("b")
    c_workers, c_log = deployment.start_workers("c")
    create = [
        "crawl",
        "create",
        "--name",
        "multi-host",
        "--seed",
        f"{deployment.site}/",
        "--user",
        ADMIN,
        "--start",
        "--no-obey-robots",
        "--max-pages",
        "100000",
        "--max-depth",
        "1000",
        "--max-retries",
        "1",
        "--threads",
        "8",
        "--slices",
        str(2 * WORKERS_PER_HOST),
    ]
    crawl_id = int(deployment.manage(*create).split()[-1])
    started = time.monotonic()
    live = LiveSocket.open(
        net["a"].address, WEB_PORT, f"/ws/crawls/{crawl_id}/", cookie=log_in(deployment.web)
    )
    frontier = Frontier(crawl_id, client=deployment.redis.client())
    responses = lambda: frontier.stats()["responses"]  # noqa: E731
    fetches = lambda host: fetches_from(deployment.site_log, host.address)  # noqa: E731
    say(
        f"\n{PAGES} pages on hosts B and C, {WORKERS_PER_HOST} workers each, "
        f"leases of {LEASE_SECONDS} s"
    )
    try:
        # Both worker machines at work, a tenth of the site done.
        wait_until(
            lambda: responses() >= PAGES // 10 and fetches(b) > 0 and fetches(c) > 0,
            "progress from both B and C",
            timeout=600,
        )

        # From here until C is back, the crawl goes at the held site's pace.
        deployment.hold.touch()
        # B loses its power in the middle of a fetch: a request of B's that arrived after the
        # hold waits 2 s at the site, so B holds its lease when every process of B dies at once
        # (B may be between slices otherwise, holding nothing, and prove no recovery).
        b_now = fetches(b)
        wait_until(lambda: fetches(b) > b_now, "a fetch from B to kill it in", timeout=300)
        killed = b.kill_everything()
        b_dead_at = time.monotonic()
        held_at_kill = leases(frontier)
        progress_at_kill = responses()
        say(
            f"  {time.monotonic() - started:.0f} s: {progress_at_kill} pages; B killed "
            f"({killed} processes), {len(held_at_kill)} leases held (B's and C's)"
        )
        progress_again = wait_until(
            lambda: responses() >= progress_at_kill + 100, "progress after B died", timeout=300
        )
        # B's leases are recovered when none held at the kill stands: each was completed, or
        # requeued by the supervisor (and perhaps claimed again, with a new deadline).
        b_recovered = wait_until(
            lambda: (
                not any(
                    leases(frontier).get(member) == deadline
                    for member, deadline in held_at_kill.items()
                )
            ),
            "recovery of B's leases",
            timeout=LEASE_SECONDS + 300,
        )
        say(
            f"  +100 pages (by C) {progress_again - b_dead_at:.1f} s after the kill; every "
            f"lease held at the kill recovered {b_recovered - b_dead_at:.1f} s after it"
        )

        # B comes back (`./run worker` again), and fetches again.
        b_before, b_restart = fetches(b), time.monotonic()
        deployment.start_workers("b")
        b_fetching = wait_until(
            lambda: fetches(b) > b_before + 50, "fetches from the restarted B", timeout=300
        )
        say(f"  B started again: 50 fetches {b_fetching - b_restart:.1f} s after `./run worker`")

        # C's cable is pulled at the switch for OUTAGE_SECONDS.
        held_at_cut, before_cut = leases(frontier), responses()
        c.unplug()
        cut_at = time.monotonic()
        time.sleep(OUTAGE_SECONDS)
        during_outage = responses() - before_cut
        # C must find work when it is back (50 pages and more): if the site ran out while held,
        # say so rather than wait for fetches that cannot come.
        left = len(site.expected()) - responses()
        assert left > 500, f"{left} pages left when C came back: raise PAGES or HOLD_SECONDS"
        c_before = fetches(c)
        c.plug()
        plugged_at = time.monotonic()
        say(
            f"  {plugged_at - started:.0f} s: C unplugged for {OUTAGE_SECONDS} s holding "
            f"{len(held_at_cut)} leases (B's and C's); B did {during_outage} pages meanwhile"
        )
        c_first = wait_until(
            lambda: fetches(c) > c_before, "a fetch from C after its link came back", timeout=300
        )
        c_fetching = wait_until(
            lambda: fetches(c) > c_before + 50,
            "fetches from C after its link came back",
            timeout=300,
        )
        say(
            f"  C fetched again {c_first - plugged_at:.1f} s after its link came back, "
            f"50 more pages {c_fetching - plugged_at:.1f} s after"
        )
        assert c_workers.poll() is None, c_log.read_text()[-3000:]
        deployment.hold.unlink()

        wait_until(
            lambda: any(m.get("state") == "finished" for _, m in live.messages),
            "the live page showing the crawl finished",
            timeout=900,
        )
    finally:
        live.close()
    say(f"  {time.monotonic() - started:.0f} s: the crawl finished")

    # Exactly the site's pages: one row per URL, the designed 500s (and only they) failed.
    expected = site.expected()
    broken = {path for path in expected if path.startswith("/broken/")}
    with psycopg.connect(deployment.postgres.url) as db:
        rows = db.execute("SELECT url FROM crawls_page WHERE crawl_id = %s", [crawl_id])
        pages = [path_of(url) for (url,) in rows]
        rows = db.execute("SELECT url FROM crawls_failedrequest WHERE crawl_id = %s", [crawl_id])
        failed = {path_of(url) for (url,) in rows}
    doubles = [path for path, n in Counter(pages).items() if n > 1]
    assert not doubles, f"{len(doubles)} URLs have two rows: {doubles[:10]}"
    assert set(pages) == expected - broken, (
        f"missing {sorted(expected - broken - set(pages))[:10]}, "
        f"extra {sorted(set(pages) - expected)[:10]}"
    )
    assert failed == broken

    # Every counter exact, as the product reports it; nothing left in flight or leased.
    status = json.loads(deployment.manage("crawl", "status", str(crawl_id), "--json"))
    assert status["state"] == "finished"
    assert status["requests"] == len(expected)
    assert status["responses"] == len(expected) - len(broken)
    assert status["errors"] == status["failed"] == len(broken)
    # Each designed 500 retried once (--max-retries 1); on a loaded machine also pages whose
    # fetch failed for a while (the held site's answers past a fetch's deadline, C's fetches
    # cut by the unplug): at most those the workers logged as tried again for another reason
    # (a retry completed after its lease ran out is logged but not counted).
    with psycopg.connect(deployment.postgres.url) as db:
        transient, lines_lost = logged_retries(db, crawl_id, but="HTTP 500")
    assert not lines_lost, f"the crawl's log lost {lines_lost} lines: retries cannot be told"
    assert len(broken) <= status["retries"] <= len(broken) + transient, (status, transient)
    assert status["queued"] == status["in_flight"] == status["delayed"] == 0
    assert frontier.is_done() and not leases(frontier)

    # Refetches: only work a lost machine held (B's at its death, C's while it was away).
    served = [path for _, path in read_log(deployment.site_log) if path != "/robots.txt"]
    refetched = len(served) - len(expected) - status["retries"]
    say(
        f"  {len(expected)} URLs, {refetched} fetched twice, {status['recovered']} leases "
        f"recovered, {len(live.messages)} live-page messages, {status['retries']} retries "
        f"({len(broken)} designed 500s, {transient} other retries logged)"
    )
    # Each refetch is a request handed out again after its lease ran out: B's at its death,
    # C's while it was away, and any a busy machine's live worker let run out meanwhile.
    assert status["recovered"] >= 1
    assert 0 <= refetched <= status["recovered"], (refetched, status["recovered"])

    # The live page kept updating: while B was dead and while C was away.
    while_b_dead = responses_in(live.messages, b_dead_at, b_recovered)
    while_c_away = responses_in(live.messages, cut_at, plugged_at)
    # Snapshots come as B completes pages (a few a second at most): on a loaded machine B may
    # complete few in 30 s, so what is asked is that they kept coming and kept rising.
    say(f"  live page: {len(while_c_away)} snapshots while C was away {while_c_away[:20]}")
    assert len(while_c_away) >= 2 and while_c_away == sorted(while_c_away), while_c_away
    assert while_c_away[-1] > while_c_away[0], "no progress shown while C was away"
    assert during_outage > 0  # B did C's share meanwhile
    assert len(while_b_dead) >= 2 and while_b_dead == sorted(while_b_dead), while_b_dead
    assert not live.closed_by_server


def path_of(url: str) -> str:
    parts = urlsplit(canonicalize(url))
    return parts.path + (f"?{parts.query}" if parts.query else "")
