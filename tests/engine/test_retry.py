"""The retry policy: which fetches are tried again, how long they wait, when they fail for good.

The fetches are real ones, from local sites and a closed port.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from crawlhub.http.client import Fetcher
from crawls.engine.retry import DONE, FAILED, MAX_RETRY_DELAY, RETRY, decide, retry_delay
from tests.support.sites import Response


@pytest.fixture
def fetcher() -> Iterator[Fetcher]:
    f = Fetcher(timeout=0.5, max_bytes=1024 * 1024, user_agent_mode="fixed")
    yield f
    f.close()


def test_without_retry_after_the_wait_doubles_from_one_second_up_to_a_minute():
    waits = [retry_delay(attempts, None) for attempts in range(8)]
    assert waits == [1, 2, 4, 8, 16, 32, MAX_RETRY_DELAY, MAX_RETRY_DELAY]
    assert MAX_RETRY_DELAY == 60


def test_the_site_s_retry_after_wins_up_to_a_minute():
    assert retry_delay(5, 3.0) == 3.0
    assert retry_delay(0, 0.0) == 0.0
    assert retry_delay(0, 3600.0) == MAX_RETRY_DELAY


@pytest.mark.parametrize("status", [500, 503, 429])
def test_server_errors_and_429_are_retried_while_retries_are_left(make_site, fetcher, status):
    site = make_site(lambda r: Response(status=status, headers={"Retry-After": "7"}))
    fetch = fetcher.fetch(site.url + "/")
    assert decide(fetch, attempts=0, max_retries=2) == RETRY
    assert decide(fetch, attempts=1, max_retries=2) == RETRY
    assert decide(fetch, attempts=2, max_retries=2) == FAILED
    assert decide(fetch, attempts=0, max_retries=0) == FAILED
    assert retry_delay(0, fetch.retry_after) == 7


def test_a_refused_connection_is_retried(fetcher):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    fetch = fetcher.fetch(f"http://127.0.0.1:{port}/")
    assert fetch.status is None
    assert decide(fetch, attempts=0, max_retries=1) == RETRY
    assert decide(fetch, attempts=1, max_retries=1) == FAILED


@pytest.mark.parametrize("status", [200, 301, 404, 403])
def test_other_answers_are_done_whatever_the_attempts(make_site, fetcher, status):
    site = make_site(lambda r: Response(status=status))
    fetch = fetcher.fetch(site.url + "/")
    assert fetch.status == status
    assert decide(fetch, attempts=0, max_retries=2) == DONE
    assert decide(fetch, attempts=5, max_retries=2) == DONE


def test_a_request_not_fetched_on_purpose_is_done():
    assert decide(None, attempts=0, max_retries=2) == DONE
    assert decide(None, attempts=9, max_retries=0) == DONE
