"""Changing a running crawl's include and exclude patterns (crawls.services.crawl_change_live,
crawls/engine/scope_changes.py): what no longer fits is dropped, counted as cancelled and said;
what is found afterwards obeys the new patterns; bad patterns are refused as at creation.

The doors (the Change limits page, the API, the CLI) only pass the patterns on: their tests
are tests/dashboard/test_scope_and_queue_pages.py and the browser's
tests/dashboard/test_browser_scope_and_queue.py."""

from __future__ import annotations

import threading
import time

import django_rq
import pytest
from django.core.exceptions import ValidationError
from django.db import connection

from crawls import services
from crawls.engine import lifecycle
from crawls.engine.frontier import Frontier
from crawls.engine.scope_changes import drop_job
from crawls.engine.slices import run_slice
from crawls.models import Crawl, CrawlEvent, CrawlState
from tests.support.crawling import drive, start_site_crawl
from tests.support.sites import Response, pages_site

BRANCHES = 200  # /k/<n> and /s/<n> link to three of each below them, for n < BRANCHES


def tree_site(request) -> Response:
    """/k/<n> (kept) and /s/<n> (to be excluded) each link to /k/ and /s/ 3n+1 .. 3n+3."""
    kind, _, n = request.path.strip("/").partition("/")
    n = int(n) if n.isdigit() else 0
    links = [f"/{k}/{3 * n + j}" for j in (1, 2, 3) for k in ("k", "s")] if n < BRANCHES else []
    body = "".join(f'<a href="{link}">{link}</a>' for link in links)
    return Response(body=f"<html><body>{body}</body></html>", delay=0.02)


def assert_sum(stats: dict) -> None:
    unfinished = stats["queued"] + stats["delayed"] + stats["in_flight"] + stats["cancelled"]
    assert stats["requests"] == stats["responses"] + stats["errors"] + unfinished, stats


class Slices:
    """The crawl's slices, one after another, in a thread of this process (as a worker runs
    them) while the test changes the crawl."""

    def __init__(self, crawl: Crawl) -> None:
        self.crawl_id, self.error = crawl.pk, None
        self.thread = threading.Thread(target=self._run, name="slices")

    def _run(self) -> None:
        try:
            n = 0
            while Crawl.objects.get(pk=self.crawl_id).state == CrawlState.RUNNING and n < 200:
                n += 1
                run_slice(self.crawl_id, f"bg-{n}", budget_seconds=2)
                lifecycle.finish_if_done(self.crawl_id)
        except Exception as exc:  # said by join()
            self.error = exc
        finally:
            connection.close()

    def __enter__(self) -> Slices:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.thread.join(timeout=120)
        assert not self.thread.is_alive(), "the crawl's slices did not end"
        assert self.error is None, self.error


def wait_for_responses(crawl: Crawl, n: int, timeout: float = 60) -> None:
    frontier, deadline = Frontier(crawl.pk), time.monotonic() + timeout
    while frontier.stats()["responses"] < n:
        assert time.monotonic() < deadline, frontier.stats()
        time.sleep(0.02)


@pytest.mark.django_db(transaction=True)  # the slices run beside the test, as on a worker
def test_an_exclusion_added_mid_crawl_is_never_fetched_after_and_its_drop_is_counted(
    user, make_site
):
    site = make_site(tree_site)
    crawl = start_site_crawl(user, site, threads=2, max_depth=20, max_pages=100_000)
    with Slices(crawl):
        wait_for_responses(crawl, 15)
        assert Frontier(crawl.pk).stats()["queued"] > 20  # a queue to drop from
        done = services.crawl_change_live(crawl=crawl, user=user, exclude_patterns=["^.*/s/"])
        seen_by_the_change = len(site.log)
        assert done.dropped and done.dropped > 0 and not done.dropping
        crawl.refresh_from_db()
    crawl.refresh_from_db()
    assert crawl.state == CrawlState.FINISHED, crawl.end_line

    # After the change, the site saw no excluded URL but those already on their way.
    after = {r.path for r in site.log[seen_by_the_change:] if r.path.startswith("/s/")}
    on_their_way = {url.removeprefix(site.url) for url in done.in_flight_urls}
    assert after <= on_their_way, sorted(after - on_their_way)
    assert any(r.path.startswith("/k/") for r in site.log[seen_by_the_change:])

    # Every excluded URL not fetched was dropped, counted as cancelled, and the sum holds.
    stats = crawl.stats
    assert_sum(stats)
    assert stats["queued"] == stats["in_flight"] == stats["delayed"] == 0
    assert stats["cancelled"] == stats["descoped"] == stats["requests"] - stats["responses"]
    assert stats["cancelled"] >= done.dropped  # the rest: queued under the old scope after it
    fetched = crawl.pages.count()
    assert fetched == stats["responses"] == len({r.path for r in site.log})
    # On the trail: the old and new value, and what was dropped.
    event = crawl.events.get(kind=CrawlEvent.Kind.CHANGED)
    assert event.user == user
    assert "exclude patterns: none -> ^.*/s/" in event.detail
    assert f"{done.dropped:,} queued request(s) dropped: they no longer fit" in event.detail


def chain_with_later(n: int) -> dict:
    """/0 -> /1 -> ... -> /n, each page also linking to /later/<i>."""
    return {
        "/": '<a href="/0">0</a>',
        **{
            f"/{i}": f'<a href="/{i + 1}">next</a> <a href="/later/{i}">later</a>' for i in range(n)
        },
        **{f"/later/{i}": "later" for i in range(n)},
    }


@pytest.mark.django_db
def test_removing_an_exclusion_lets_links_found_afterwards_in(user, make_site):
    site = make_site(pages_site(chain_with_later(30)))
    crawl = start_site_crawl(user, site, threads=1, max_depth=100, exclude_patterns=["/later/"])
    n = 0
    while len(site.log) < 3:  # part of the chain, no /later/ fetched
        n += 1
        run_slice(crawl.pk, f"first-{n}", budget_seconds=0.5)
    before = len(site.log)
    assert 2 <= before < 30 and not any("/later/" in r.path for r in site.log)
    done = services.crawl_change_live(crawl=crawl, user=user, exclude_patterns=[])
    assert done.lines[0] == "exclude patterns: /later/ -> none" and done.dropped == 0
    crawl = drive(crawl)
    later = {r.path for r in site.log if r.path.startswith("/later/")}
    # The links of every page recorded after the change come in (those of pages recorded
    # before were not queued, and are not seen again).
    assert "/later/29" in later and len(later) >= 30 - before
    assert crawl.stats["cancelled"] == 0
    assert_sum(crawl.stats)


@pytest.mark.django_db
def test_bad_patterns_are_refused_with_the_messages_of_creation_and_nothing_changes(user):
    crawl = services.crawl_create(
        user=user, name="p", seeds=["https://example.com/"], exclude_patterns=["/old/"]
    )
    services.crawl_start(crawl=crawl, user=user)
    bad = ["/fine/", "(a", "", "x(?=y)"]
    with pytest.raises(ValidationError) as at_creation:
        services.crawl_create(
            user=user, name="q", seeds=["https://example.com/"], exclude_patterns=bad
        )
    with pytest.raises(ValidationError) as caught:
        services.crawl_change_live(crawl=crawl, user=user, exclude_patterns=bad, max_pages=5)
    messages = caught.value.message_dict["exclude_patterns"]
    assert messages == at_creation.value.message_dict["exclude_patterns"]
    assert len(messages) == 2 and messages[0].startswith("line 2: ")
    assert messages[1].startswith("line 4: ") and "lookahead" in messages[1]
    crawl.refresh_from_db()
    assert crawl.exclude_patterns == ["/old/"] and crawl.max_pages == 1000
    assert Frontier(crawl.pk).scope_generation() == 0
    assert not crawl.events.filter(kind=CrawlEvent.Kind.CHANGED).exists()
    services.crawl_cancel(crawl=crawl, user=user)


@pytest.mark.django_db
def test_a_link_queued_under_the_old_scope_after_the_change_is_dropped_when_claimed(
    user, make_site
):
    """A slice that had not taken the change in yet may still queue a link the new patterns
    refuse: the slice that claims it checks it and drops it, unfetched."""
    site = make_site(pages_site({"/": "<a href='/a'>a</a>", "/a": "a", "/x/late": "late"}))
    crawl = start_site_crawl(user, site, threads=1)
    services.crawl_change_live(crawl=crawl, user=user, exclude_patterns=["/x/"])
    frontier = Frontier(crawl.pk)
    frontier.add_seeds([site.url + "/x/late"], depth=1)  # as a stale slice's completion would
    crawl = drive(crawl)
    assert [r.path for r in site.log] == ["/", "/a"]
    stats = crawl.stats
    assert (stats["cancelled"], stats["descoped"], stats["responses"]) == (1, 1, 2)
    assert_sum(stats)


@pytest.mark.django_db
def test_a_big_queue_is_dropped_in_the_background_and_the_total_said(
    user, django_capture_on_commit_callbacks, monkeypatch
):
    crawl = services.crawl_create(
        user=user, name="big", seeds=["http://a.test/"], max_pages=100_000, obey_robots=False
    )
    services.crawl_start(crawl=crawl, user=user)
    frontier = Frontier(crawl.pk)
    frontier.add_seeds([f"http://a.test/s/{i}" for i in range(3000)], depth=1)
    frontier.add_seeds([f"http://a.test/k/{i}" for i in range(1000)], depth=1)
    monkeypatch.setattr("crawls.engine.scope_changes.INLINE_BUDGET", 500)
    monkeypatch.setattr("crawls.engine.scope_changes.JOB_BUDGET", 700)
    with django_capture_on_commit_callbacks(execute=True):
        done = services.crawl_change_live(crawl=crawl, user=user, exclude_patterns=["/s/"])
    assert done.dropping and 0 < done.dropped < 3000
    assert "the rest of the queue is looked at in the background" in done.lines[-1]
    [job] = django_rq.get_queue("control").jobs  # run here, as a worker would
    assert job.func is drop_job
    assert job.perform()["dropped"] == 3000 - done.dropped
    stats = frontier.stats()
    assert stats["cancelled"] == stats["descoped"] == 3000 and stats["queued"] == 1001
    assert_sum(stats)
    said = crawl.events.filter(kind=CrawlEvent.Kind.CHANGED).first().detail
    assert said.startswith("scope change 1: 3,000 queued request(s) dropped in all")
    services.crawl_cancel(crawl=crawl, user=user)
