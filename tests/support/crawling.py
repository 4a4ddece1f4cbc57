"""Helpers to run crawls in tests: in-process slices, or real RQ worker processes."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from channels.layers import channel_layers
from django.conf import settings
from django.db import connection
from rq import Worker

from crawlhub.redis import redis_config
from crawlhub.redis.connections import get_redis, reset_pools
from crawlhub.sample_site import SampleSite
from crawls import services
from crawls.engine import lifecycle
from crawls.engine.frontier import Frontier
from crawls.engine.request import Request, canonicalize
from crawls.engine.slices import run_slice
from crawls.models import Crawl, CrawlState
from tests.support import processes
from tests.support.sites import Response

ROOT = Path(__file__).resolve().parents[2]

# Short leases, slices and supervisor passes, so that crawls on real workers recover and end in
# seconds (the fleet fixture's workers run with these).
FAST_WORKERS = {
    "CRAWLHUB_LEASE_SECONDS": "3",
    "CRAWLHUB_SLICE_SECONDS": "3",
    "CRAWLHUB_SUPERVISOR_SECONDS": "1",
}


def use_redis(url: str) -> None:
    """Point crawlhub, RQ, Channels and child processes at the Redis at `url`."""
    settings.REDIS_URL = url
    for queue in settings.RQ_QUEUES.values():
        timeout = queue["DEFAULT_TIMEOUT"]
        queue.clear()  # the same dicts django-rq holds
        queue.update(redis_config.rq_connection(url), DEFAULT_TIMEOUT=timeout)
    settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"] = redis_config.channel_layer_hosts(url)
    os.environ["REDIS_URL"] = url
    reset_pools()
    channel_layers.backends.clear()


# The keys that say which RQ workers and cron schedulers are alive. While a module shares its
# dashboard's processes between tests (tests/dashboard/conftest.py), the reset between tests
# keeps their registrations with them: kept_between_tests holds these patterns only then.
REGISTRATIONS = (
    "rq:workers",
    "rq:workers:*",
    "rq:worker:*",
    "rq:cron_scheduler:*",
    "rq:cron_schedulers",
)
kept_between_tests: list[str] = []


def reset_redis(client) -> None:
    """Empty Redis for the next test, all but the keys kept_between_tests matches: those come
    back as they were, with their time to live."""
    saved = []
    for pattern in kept_between_tests:
        for key in client.scan_iter(match=pattern):
            dump, ttl = client.dump(key), client.pttl(key)
            if dump is not None and ttl != -2:  # -2: gone since the scan
                saved.append((key, max(ttl, 0), dump))
    client.flushall()
    for key, ttl, dump in saved:
        client.restore(key, ttl, dump, replace=True)


@contextlib.contextmanager
def database_refuses_pages(url_part: str):
    """A trigger in the test database that refuses every Page row whose URL holds `url_part`, as
    a database refuses a row it cannot take ("string or blob too big"): a real database error
    for that one row, on SQLite and PostgreSQL. Dropped on the way out."""
    if connection.vendor == "sqlite":
        create = [
            "CREATE TRIGGER refuse_pages BEFORE INSERT ON crawls_page "
            f"WHEN instr(NEW.url, '{url_part}') > 0 "
            "BEGIN SELECT RAISE(ABORT, 'this row is refused on purpose'); END"
        ]
        drop = ["DROP TRIGGER IF EXISTS refuse_pages"]
    else:
        create = [
            "CREATE FUNCTION refuse_pages() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF position('{url_part}' in NEW.url) > 0 THEN "
            "RAISE EXCEPTION 'this row is refused on purpose'; END IF; RETURN NEW; END $$",
            "CREATE TRIGGER refuse_pages BEFORE INSERT ON crawls_page "
            "FOR EACH ROW EXECUTE FUNCTION refuse_pages()",
        ]
        drop = [
            "DROP TRIGGER IF EXISTS refuse_pages ON crawls_page",
            "DROP FUNCTION IF EXISTS refuse_pages()",
        ]
    with connection.cursor() as cursor:
        for statement in create:
            cursor.execute(statement)
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            for statement in drop:
                cursor.execute(statement)


def make_crawl(user, name: str = "c", **options) -> Crawl:
    """A draft crawl of user's through the services; robots.txt off, a seed nobody answers
    unless seeds= says otherwise."""
    options.setdefault("obey_robots", False)
    seeds = options.pop("seeds", ["http://127.0.0.1:9/"])
    return services.crawl_create(user=user, name=name, seeds=seeds, **options)


def start_site_crawl(user, site, **options) -> Crawl:
    """A started crawl of a local site from its root; robots.txt off and 4 threads unless
    options say otherwise."""
    options.setdefault("obey_robots", False)
    options.setdefault("threads", 4)
    crawl = services.crawl_create(user=user, name="t", seeds=[site.url + "/"], **options)
    services.crawl_start(crawl=crawl, user=user)
    return crawl


def drive(crawl: Crawl, *, timeout: float = 60, budget: float = 5) -> Crawl:
    """Run the crawl's slices in this process, one after another, until it ends."""
    deadline = time.monotonic() + timeout
    n = 0
    while time.monotonic() < deadline:
        crawl.refresh_from_db()
        if crawl.state != CrawlState.RUNNING:
            return crawl
        n += 1
        run_slice(crawl.pk, f"test-{n}", budget_seconds=budget)
        lifecycle.finish_if_done(crawl.pk)
    raise AssertionError(f"crawl {crawl.pk} still {crawl.state} after {timeout} s")


def fetched_paths(crawl: Crawl) -> list[str]:
    """Canonical path?query of every page row (one per fetched URL)."""
    paths = []
    for url in crawl.pages.values_list("url", flat=True):
        parts = urlsplit(canonicalize(url))
        paths.append(parts.path + (f"?{parts.query}" if parts.query else ""))
    return paths


def database_url() -> str:
    """The test database as a URL, for worker processes."""
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    host, port = s["HOST"] or "127.0.0.1", s["PORT"] or 5432
    return f"postgres://{s['USER']}:{s['PASSWORD']}@{host}:{port}/{s['NAME']}"


class WorkerFleet:
    """Real `manage.py rqworker` processes (and the periodic supervisor) for a test. Each is
    registered for stopping as it starts (tests.support.processes): stop() ends them all, and
    the suite stops what a test left running."""

    def __init__(
        self, *, env: dict[str, str], worker_class: str = "", outlives_the_test: bool = False
    ) -> None:
        self.env = {**os.environ, "DATABASE_URL": database_url(), **env}
        self.worker_class = worker_class
        # A fleet shared by a module's tests (processes.spawn's outlives_the_test).
        self.outlives_the_test = outlives_the_test
        self.workers: list[subprocess.Popen] = []
        self.cron: subprocess.Popen | None = None
        self.killed_horses = 0

    def start_worker(self) -> subprocess.Popen:
        extra = ["--worker-class", self.worker_class] if self.worker_class else []
        proc = processes.spawn(
            [sys.executable, "manage.py", "rqworker", *extra, "control", "crawls", "default"],
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            outlives_the_test=self.outlives_the_test,
        )
        self.workers.append(proc)
        return proc

    def start_cron(self) -> None:
        self.cron = processes.spawn(
            [sys.executable, "manage.py", "rqcron", "crawlhub.cron"],
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            outlives_the_test=self.outlives_the_test,
        )

    def wait_until_registered(self, count: int, *, timeout: float = 120) -> None:
        """Wait until `count` workers have registered with RQ (Django loaded, Redis reached)."""
        deadline = time.monotonic() + timeout
        while (registered := Worker.count(connection=get_redis())) < count:
            dead = [proc.returncode for proc in self.workers if proc.poll() is not None]
            assert not dead, f"RQ workers exited with codes {dead} before registering"
            assert time.monotonic() < deadline, (
                f"{registered} of {count} RQ workers registered within {timeout:.0f} s"
            )
            time.sleep(0.2)

    def alive(self) -> list[subprocess.Popen]:
        return [w for w in self.workers if w.poll() is None]

    def busy_worker(self, rng: random.Random, timeout: float = 60) -> subprocess.Popen:
        """A live worker running a job (its work horse is a child process), chosen by rng: a
        replaced worker sits idle until the supervisor hands its lost slice out again."""
        deadline = time.monotonic() + timeout
        while not (busy := [w for w in self.alive() if processes.children(w.pid)]):
            assert time.monotonic() < deadline, f"no worker ran a slice within {timeout:.0f} s"
            self.keep_alive()
            time.sleep(0.05)
        return rng.choice(busy)

    def keep_alive(self) -> None:
        """Replace workers that died (as `up` does): a killed or Redis-less worker exits."""
        for proc in list(self.workers):
            if proc.poll() is not None:
                self.workers.remove(proc)
                self.start_worker()
        if self.cron is not None and self.cron.poll() is not None:
            self.start_cron()

    def kill9(self, proc: subprocess.Popen) -> None:
        """kill -9 the worker and the work horse running its job. RQ puts the horse in a
        process group of its own (os.setpgrp), so killing the worker's group alone would leave
        the horse to finish its slice."""
        horses = processes.children(proc.pid)
        os.killpg(proc.pid, signal.SIGKILL)
        for pid in horses:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        proc.wait()
        self.killed_horses += len(horses)

    def stop(self) -> None:
        """SIGTERM every worker and the supervisor at once (a worker finishes its slice), then
        SIGKILL what is left of them and of their work horses after 20 s."""
        processes.stop_all([*self.workers, *([self.cron] if self.cron else [])], timeout=20)


def start_sample_crawl(user, make_site, *, pages: int, delay: float, **options):
    """A started crawl of a generated site (SampleSite, seed 3) served with `delay` per page:
    (site, server, crawl)."""
    site = SampleSite(pages=pages, seed=3)
    server = make_site(sample_handler(site, delay))
    crawl = services.crawl_create(
        user=user,
        name="chaos",
        seeds=[server.url + "/"],
        obey_robots=False,
        max_pages=100_000,
        max_depth=1000,
        max_retries=1,
        threads=4,
        slices=2,
        **options,
    )
    services.crawl_start(crawl=crawl, user=user)
    return site, server, crawl


def wait_for_state(
    crawl: Crawl, states: set[str], *, timeout: float, fleet: WorkerFleet | None = None
) -> Crawl:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if fleet is not None:
            fleet.keep_alive()
        crawl.refresh_from_db()
        if crawl.state in states:
            return crawl
        time.sleep(0.2)
    raise AssertionError(
        f"crawl {crawl.pk} is {crawl.state}, not {states}, after {timeout} s; its counters: "
        f"{Frontier(crawl.pk).stats()}"
    )


def sample_handler(site: SampleSite, delay: float | Callable[[], float]):
    """The site's pages, each answered `delay` seconds late (or delay() seconds: a test that
    paces a crawl only while it looks at it)."""

    def handler(request):
        status, headers, body = site.render(request.path)
        headers = dict(headers)
        content_type = headers.pop("Content-Type", "text/html; charset=utf-8")
        headers.pop("Content-Length", None)
        return Response(
            status=status,
            body=body,
            headers=headers,
            content_type=content_type,
            delay=delay() if callable(delay) else delay,
        )

    return handler


def assert_exact(crawl, site: SampleSite, *, max_retries: int = 1):
    """The crawl ended with exactly the site's URLs: every page fetched once into a row, the
    site's designed 500s (and only they) in the failure queue after their retries, and every
    counter equal to what the site implies."""
    expected = site.expected()
    broken = {path for path in expected if path.startswith("/broken/")}
    done = fetched_paths(crawl)
    failed = {"/" + url.split("/", 3)[-1] for url in crawl.failures.values_list("url", flat=True)}
    got = set(done) | failed
    missing, extra = sorted(expected - got), sorted(got - expected)
    assert not missing and not extra, (
        f"{len(missing)} missing {missing[:10]}, {len(extra)} extra {extra[:10]}, "
        f"stats {crawl.stats}"
    )
    assert failed == broken, f"failed but not broken: {sorted(failed - broken)[:10]}"
    assert len(done) == len(set(done)) == len(expected) - len(broken)
    stats = crawl.stats
    assert stats["requests"] == len(expected)
    assert stats["responses"] == len(expected) - len(broken)
    assert stats["errors"] == stats["failed"] == len(broken)
    assert stats["retries"] == len(broken) * max_retries
    assert stats["queued"] == stats["in_flight"] == stats["delayed"] == 0
    # The status classes hold every final status: responses, and the 500s out of retries.
    classes = ("status_2xx", "status_3xx", "status_4xx", "status_5xx")
    assert stats["failed_http"] == len(broken)
    assert sum(stats[name] for name in classes) == stats["responses"] + stats["failed_http"]
    assert crawl.pages.count() + crawl.failures.count() == len(expected)
    assert Frontier(crawl.pk).is_done()


def refetched(crawl, site: SampleSite, server) -> int:
    """Fetches the site served beyond one per URL (a 500, once more per retry; a redirect and
    its target once each): the work a dead worker held and did again."""
    fetches = [path for path in server.paths() if path != "/robots.txt"]
    return len(fetches) - len(site.expected()) - crawl.stats["retries"]


def in_flight_paths(crawl) -> list[str]:
    """The path?query of every request the crawl's backup hash holds (claimed, not completed):
    read right after a kill -9, before the dead slice's leases run out, what it held."""
    paths = []
    for raw in get_redis().hvals(Frontier(crawl.pk).key("backup")):
        parts = urlsplit(Request.unpack(raw).url)
        paths.append(parts.path + (f"?{parts.query}" if parts.query else ""))
    return paths


def assert_refetched_only_held(crawl, site: SampleSite, server, held: list[list[str]]) -> None:
    """Only requests whose worker died were fetched twice: each was claimed and not completed
    when its worker was killed (fetched and waiting for its batch's completion, being fetched,
    or claimed ahead), so it was in one of `held`, the backup hash read right after each kill
    (in_flight_paths). The site's 500s are fetched again by their retries."""
    twice = refetched(crawl, site, server)
    print("repeated fetches:", twice, "held at the kills:", [len(paths) for paths in held])
    assert 0 <= twice <= sum(map(len, held))
    fetched = Counter(path for path in server.paths() if not path.startswith("/broken/"))
    again = {path for path, n in fetched.items() if n > 1 and path != "/robots.txt"}
    assert again <= set().union(*held), f"fetched twice, never held by a killed worker: {again}"


def wait_for_progress(crawl, pages: int, fleet: WorkerFleet, timeout: float = 120):
    """Until the crawl has `pages` responses, replacing workers that died; the workers' own
    start-up (Django, Redis) counts in the timeout."""
    frontier = Frontier(crawl.pk)
    deadline = time.monotonic() + timeout
    while frontier.stats()["responses"] < pages:
        assert time.monotonic() < deadline, (
            f"crawl {crawl.pk} did not reach {pages} responses within {timeout:.0f} s: "
            f"{frontier.stats()}"
        )
        fleet.keep_alive()
        time.sleep(0.1)
