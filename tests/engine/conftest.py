"""Fixtures of the engine's tests."""

from __future__ import annotations

import pytest

from crawls.engine.frontier import Frontier


@pytest.fixture
def frontier() -> Frontier:
    """Crawl 1, running, with limits that never get in the way."""
    crawl = Frontier(1)
    crawl.configure(max_pages=1_000_000, max_depth=100, host_delay=0)
    crawl.set_state("running")
    return crawl
