"""Fixtures shared by the whole suite: a private real Redis, local sites, named users and their
clients, real RQ workers; and the guard that no test leaves a process running.

Folders have their own conftest.py for what only they use (tests/dashboard: the browser and a
live dashboard server). Helpers that are not fixtures are in tests/support/.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections
from django.test import Client

from crawlhub.http import chromium
from crawlhub.processes import launcher
from crawlhub.redis.connections import get_redis
from crawls.engine import slices
from tests.support import processes, template_database
from tests.support.clients import PASSWORD
from tests.support.crawling import FAST_WORKERS, WorkerFleet, reset_redis, use_redis
from tests.support.parallel import WORKER
from tests.support.sites import Handler, LocalSite, RawServer, free_port

# Every process this test run starts carries MARKER=<TOKEN> <test id> in its environment (set
# before each test, inherited by whatever it spawns): a process still carrying it after its
# module, or at the end of the run, was left behind.
TOKEN = f"{os.getpid()}-{secrets.token_hex(4)}"


def pytest_configure(config: pytest.Config) -> None:
    os.environ[processes.MARKER] = f"{TOKEN} the start of the test run"
    settings.PASSWORD_HASHERS = [
        "tests.support.clients.QuickPBKDF2PasswordHasher",
        *settings.PASSWORD_HASHERS,
    ]


# What opens the test database: a test that asks for none of these never touches it.
_DATABASE_FIXTURES = {"db", "transactional_db", "django_db_reset_sequences", "live_server"}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--database-only",
        action="store_true",
        help="run only the tests that use the database (CI's second run, on PostgreSQL)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A browser takes seconds to start and to render: a browser test is a slow one, marked so
    # or not (the quick subset, -m "not slow", leaves it out).
    for item in items:
        if item.get_closest_marker("browser") and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
    if config.getoption("--database-only"):
        _database_only(config, items)


def _database_only(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep, drop = [], []
    for item in items:
        uses_db = item.get_closest_marker("django_db") or _DATABASE_FIXTURES & set(
            getattr(item, "fixturenames", ())
        )
        (keep if uses_db else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    os.environ[processes.MARKER] = f"{TOKEN} {item.nodeid}"


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The last check, once every fixture is torn down (the session's Redis included)."""
    left = processes.reap_leftovers(TOKEN)
    if left:
        session.config.stash[_LEFT_AT_THE_END] = left
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    left = config.stash.get(_LEFT_AT_THE_END, [])
    if left:
        terminalreporter.section("processes left running", red=True)
        for leftover in left:
            terminalreporter.line(f"killed {leftover}", red=True)


_LEFT_AT_THE_END = pytest.StashKey[list]()


@pytest.fixture(scope="session")
def django_db_keepdb(
    request: pytest.FixtureRequest,
    django_db_modify_db_settings: None,
    django_db_use_migrations: bool,
    django_db_createdb: bool,
) -> bool:
    """pytest-django keeps the test database it finds (as with `--reuse-db`) when this worker
    copied the run's migrated template there (tests/support/template_database.py): it then
    only checks that nothing is left to migrate. Asked after django_db_modify_db_settings,
    which names each worker's database."""
    if request.config.getvalue("reuse_db"):
        return True
    run_dir = os.environ.get(template_database.RUN_DIR_VARIABLE, "")
    if not WORKER or not run_dir or not django_db_use_migrations or django_db_createdb:
        return False
    return template_database.copy_into(
        test_database=settings.DATABASES["default"], run_dir=Path(run_dir)
    )


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup):
    """pytest-django's test databases; before they are dropped, close the connections that
    websocket consumers opened in asgiref's sync thread (PostgreSQL will not drop a database
    someone is still connected to)."""
    yield
    asyncio.run(sync_to_async(connections.close_all)())


@pytest.fixture(scope="session", autouse=True)
def redis_server(tmp_path_factory) -> Iterator[launcher.EmbeddedRedis]:
    """One embedded Redis for the test session, on a free loopback port."""
    server = launcher.EmbeddedRedis(tmp_path_factory.mktemp("redis"), port=free_port())
    try:
        server.start(timeout=60)
        use_redis(server.url)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module", autouse=True)
def no_process_left_behind(redis_server) -> Iterator[None]:
    """After each module: any process a test of it started and nobody stopped (a worker's work
    horse, a child of `up`, a browser...) fails the module's last test, and is killed before it
    can disturb the next module."""
    yield
    session_redis = {redis_server.process.pid} if redis_server.process else set()
    left = processes.reap_leftovers(TOKEN, exclude=session_redis)
    if left:
        pytest.fail("processes left running, now killed:\n" + "\n".join(map(str, left)))


@pytest.fixture(autouse=True)
def stop_what_the_test_started() -> Iterator[None]:
    """Processes spawned during a test (tests.support.processes.spawn) are stopped when it ends,
    whatever happened to the test or to the fixture that started them."""
    bookmark = processes.started()
    yield
    processes.stop_started_since(bookmark)


@pytest.fixture(autouse=True)
def redis(redis_server):
    """A Redis client; every test starts and ends with an empty Redis (but for the registrations
    of the processes a module shares between its tests: tests.support.crawling.reset_redis)."""
    client = get_redis()
    reset_redis(client)
    yield client
    reset_redis(client)


# -- sites -----------------------------------------------------------------------------------


@pytest.fixture
def needs_chromium() -> None:
    """Chromium is required (CRAWLHUB_REQUIRE_BROWSER=1 in CI) or the test is skipped."""
    found = chromium.locate()
    if not found:
        if os.environ.get("CRAWLHUB_REQUIRE_BROWSER") == "1":
            pytest.fail(found.problem + " (CRAWLHUB_REQUIRE_BROWSER=1)")
        pytest.skip(found.problem)


@pytest.fixture
def make_site() -> Iterator[Callable[[Handler], LocalSite]]:
    """Start local HTTP sites for a test: make_site(handler, host="127.0.0.1") -> LocalSite
    (stopped after)."""
    sites: list[LocalSite] = []

    def make(handler: Handler, host: str = "127.0.0.1") -> LocalSite:
        site = LocalSite(handler, host).start()
        sites.append(site)
        return site

    yield make
    for site in sites:
        site.stop()


@pytest.fixture
def raw_server() -> Iterator[Callable[..., RawServer]]:
    """Start servers that misbehave at the socket level: raw_server(play, lifetime=10)."""
    servers: list[RawServer] = []

    def make(play: Callable[[socket.socket, RawServer], None], lifetime: float = 10) -> RawServer:
        server = RawServer(play, lifetime=lifetime).__enter__()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.__exit__()


# -- named users and their clients -------------------------------------------------------------


@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create_user(username="alice", password=PASSWORD)


@pytest.fixture
def other_user(django_user_model):
    return django_user_model.objects.create_user(username="bob", password=PASSWORD)


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_user(username="sam", password=PASSWORD, is_staff=True)


@pytest.fixture
def user_client(user):
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def other_client(other_user):
    client = Client()
    client.force_login(other_user)
    return client


@pytest.fixture
def staff_client(staff):
    client = Client()
    client.force_login(staff)
    return client


# -- crawling ----------------------------------------------------------------------------------


@pytest.fixture
def quick_slices(monkeypatch):
    """In-process slices hand over after 0.3 s without work (drive() runs the next one anyway)."""
    monkeypatch.setattr(slices, "IDLE_EXIT_SECONDS", 0.3)


@pytest.fixture
def fleet() -> Iterator[WorkerFleet]:
    """Real RQ worker processes with short leases and slices (FAST_WORKERS), stopped after the
    test, even when it fails: fleet.start_worker(), fleet.start_cron(), fleet.kill9(proc)."""
    fleet = WorkerFleet(env=FAST_WORKERS)
    try:
        yield fleet
    finally:
        fleet.stop()
