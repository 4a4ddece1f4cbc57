"""The suite runs in parallel with pytest-xdist (pyproject.toml's addopts: `-n auto`): each
worker is a test run of its own, and owns its embedded Redis (tests/conftest.py), its ports
(free_port), its process marker (the conftest's TOKEN) and, set here, its data dir: the SQLite
test database, the secret key and what daphne and RQ workers started by its tests read.

Tests are handed out a file at a time (`--dist loadfile`), the longest files first: what a
module shares between its tests (the browser and the dashboard's processes, tests/dashboard/
conftest.py) is started once, in one worker, and the guard after each module sees the module
whole. A test that must not share something with the others of its worker says so in its own
fixtures; nothing is shared between workers but the machine.

Loaded with `-p tests.support.parallel` (addopts) so that it runs before pytest-django reads
Django's settings, which read CRAWLHUB_DATA_DIR once. `./run test -n 0` runs in one process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support import durations, processes, template_database

# Bytecode is cached during the suite, whatever the environment says (PYTHONDONTWRITEBYTECODE
# is set on some machines, this one included): each worker rewrites the asserts of some 120
# test modules, and the suite starts hundreds of Python processes (manage.py, `up`, workers)
# that import the project; without the cache each of them compiles it all again. Collecting
# took 13 s of CPU per worker without it, 5.5 s with it. The caches are in __pycache__
# folders, which git ignores.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# How many workers `-n auto` starts. The suite mostly waits (on processes starting, sockets,
# crawls of delayed sites), so more workers than the machine's two cores overlap those waits;
# CRAWLHUB_TEST_WORKERS overrides it (docs/testing.md has the measurements).
WORKERS = 4

WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
# A new directory for each worker of each run (two runs in one checkout do not meet), inside
# CRAWLHUB_DATA_DIR when it is set, else in the system's temporary directory; removed when the
# worker ends.
DATA_DIR: Path | None = None
if WORKER:
    DATA_DIR = Path(
        tempfile.mkdtemp(
            prefix=f"crawlhub-test-{WORKER}-", dir=os.environ.get("CRAWLHUB_DATA_DIR") or None
        )
    )
    os.environ["CRAWLHUB_DATA_DIR"] = str(DATA_DIR)

# A directory the run's workers share (they inherit the controller's environment), made by the
# controller: the migrated template of the test database that each worker copies
# (tests/support/template_database.py).
RUN_DIR: Path | None = None
_template_maker: subprocess.Popen | None = None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--store-durations",
        action="store_true",
        help="write what each test took into tests/durations.json (the order files are handed "
        "out in)",
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In each worker, the files in the order they are handed out (--no-loadscope-reorder):
    the longest first, by the seconds their tests took in a measured run
    (tests/support/durations.py), so that the run does not end waiting on a browser module or
    a whole-crawl test that started last. Every worker sorts alike (xdist checks that they
    collected the same list)."""
    if not WORKER:
        return
    measured = durations.load()
    cost: dict[str, float] = {}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        cost[path] = cost.get(path, 0.0) + durations.guess(item, measured)
    order = {path: n for n, path in enumerate(sorted(cost, key=lambda path: -cost[path]))}
    items.sort(key=lambda item: order[item.nodeid.split("::", 1)[0]])


def pytest_configure(config: pytest.Config) -> None:
    """In the controller of a parallel run on SQLite: the run's directory, and the template of
    the test database started in it while the workers start and collect (on PostgreSQL each
    worker migrates its own database)."""
    global RUN_DIR, _template_maker
    if WORKER:
        return
    if config.getoption("store_durations"):
        config.pluginmanager.register(durations.Recorder(), "crawlhub-durations")
    parallel = config.getoption("dist", "no") != "no" and config.getoption("numprocesses", 0)
    if not parallel or os.environ.get("DATABASE_URL"):
        return
    RUN_DIR = Path(tempfile.mkdtemp(prefix="crawlhub-test-run-"))
    os.environ[template_database.RUN_DIR_VARIABLE] = str(RUN_DIR)
    _template_maker = template_database.start(run_dir=RUN_DIR)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Before the conftest's check that no process is left (a run without a database test can
    end before the template is made)."""
    if _template_maker is not None:
        processes.stop(_template_maker)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _template_maker is not None:
        processes.stop(_template_maker)
    for made in (DATA_DIR, RUN_DIR):
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    raw = os.environ.get("CRAWLHUB_TEST_WORKERS", "").strip()
    if not raw:
        return WORKERS
    try:
        return max(0, int(raw))
    except ValueError:
        raise pytest.UsageError(
            f"CRAWLHUB_TEST_WORKERS must be a whole number of workers, got {raw!r}"
        ) from None
