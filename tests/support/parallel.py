"""The suite runs in parallel with pytest-xdist (pyproject.toml's addopts: `-n auto`): each
worker is a test run of its own, and owns its embedded Redis (tests/conftest.py), its ports
(free_port), its process marker (the conftest's TOKEN) and, set here, its data dir: the SQLite
test database, the secret key and what daphne and RQ workers started by its tests read.

Loaded with `-p tests.support.parallel` (addopts) so that it runs before pytest-django reads
Django's settings, which read CRAWLHUB_DATA_DIR once. `./run test -n 0` runs in one process.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# How many workers `-n auto` starts. The suite mostly waits (on processes starting, sockets,
# crawls of delayed sites), so more workers than the machine's two cores overlap those waits;
# CRAWLHUB_TEST_WORKERS overrides it (docs/testing.md has the measurements).
WORKERS = 4

WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if WORKER:
    _base = Path(os.environ.get("CRAWLHUB_DATA_DIR") or ROOT / "var")
    os.environ["CRAWLHUB_DATA_DIR"] = str(_base / f"test-{WORKER}")


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
