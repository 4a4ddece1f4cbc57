"""Changing a crawl once it exists (crawls.services.editing): a draft's settings, a running crawl's
limits (taken by the frontier and the next slices), run again, delete; and one meaning of
"error" in the counters (a 500 out of retries is an error and a 5xx)."""

import pytest
from django.core.exceptions import ValidationError

from crawls import services
from crawls.engine import jobs
from crawls.engine.frontier import Frontier
from crawls.engine.live import progress, snapshot
from crawls.models import Crawl, CrawlDeletion, CrawlEvent, CrawlState, Page
from tests.support.crawling import drive, start_site_crawl
from tests.support.sites import Response, pages_site

pytestmark = pytest.mark.django_db


def page(*links: str) -> str:
    return "<html><body>" + "".join(f'<a href="{x}">{x}</a>' for x in links) + "</body></html>"


def chain_site(n: int) -> dict:
    """/0 links to /1 ... each page to the next: one new URL per page fetched."""
    return {"/": page("/0"), **{f"/{i}": page(f"/{i + 1}") for i in range(n)}}


def test_a_500_out_of_retries_is_an_error_a_failure_and_a_5xx(user, make_site):
    site = make_site(
        pages_site(
            {
                "/": page("/boom", "/gone"),
                "/boom": Response(status=500),
                "/gone": Response(status=404),
            }
        )
    )
    crawl = drive(start_site_crawl(user, site, max_retries=0))
    stats = crawl.stats
    assert (stats["errors"], stats["failed"], stats["failed_http"]) == (1, 1, 1)
    assert stats["status_5xx"] == 1 and stats["status_4xx"] == 1
    shown = snapshot(crawl)
    assert shown["stats"]["no_response"] == 0
    assert shown["progress"] == {
        "done": 3,
        "known": 3,
        "percent": 100,
        "capped": False,
        "open": False,
    }

    # Retried: off errors, failed and the 5xx class, and back on them when it fails again.
    assert services.crawl_retry_failed(crawl=crawl, user=user) == 1
    stats = Frontier(crawl.pk).stats()
    assert (stats["errors"], stats["failed"], stats["failed_http"], stats["status_5xx"]) == (
        0,
        0,
        0,
        0,
    )
    crawl = drive(crawl)
    assert (crawl.stats["errors"], crawl.stats["status_5xx"]) == (1, 1)


def test_progress_is_done_against_known_and_capped_by_max_pages(user):
    crawl = services.crawl_create(user=user, name="p", seeds=["https://example.com/"], max_pages=10)
    crawl.state = CrawlState.RUNNING
    stats = {"requests": 10, "responses": 4, "errors": 1, "cancelled": 0}
    assert progress(crawl, stats) == {
        "done": 5,
        "known": 10,
        "percent": 50,
        "capped": True,
        "open": True,
    }
    crawl.max_pages = 100
    assert progress(crawl, stats)["capped"] is False


def test_a_draft_is_edited_whole_and_audited(user):
    crawl = services.crawl_create(user=user, name="d", seeds=["https://example.com/"])
    changed = services.crawl_update(
        crawl=crawl,
        user=user,
        name="d2",
        seeds="https://example.com/\nhttps://example.org/",
        max_pages=5,
        include_patterns=["^https://example"],
    )
    crawl.refresh_from_db()
    assert crawl.name == "d2" and crawl.max_pages == 5 and len(crawl.seeds) == 2
    assert set(changed) >= {"name", "seeds", "max_pages", "include_patterns"}
    assert crawl.events.filter(kind=CrawlEvent.Kind.EDITED, user=user).exists()
    with pytest.raises(ValidationError) as caught:
        services.crawl_update(crawl=crawl, user=user, name="", seeds="ftp://x", max_pages=0)
    assert {"name", "seeds", "max_pages"} <= set(caught.value.message_dict)


def test_a_running_crawl_may_change_only_its_live_settings(user):
    crawl = services.crawl_create(user=user, name="r", seeds=["https://example.com/"])
    with pytest.raises(services.CrawlActionError):
        services.crawl_change_live(crawl=crawl, user=user, max_pages=5)  # a draft: edit it
    services.crawl_start(crawl=crawl, user=user)
    with pytest.raises(ValidationError) as caught:
        services.crawl_change_live(crawl=crawl, user=user, user_agent="x")
    assert "user_agent" in caught.value.message_dict
    with pytest.raises(ValidationError) as caught:
        services.crawl_change_live(crawl=crawl, user=user, threads=0, max_pages=-1)
    assert {"threads", "max_pages"} <= set(caught.value.message_dict)
    with pytest.raises(services.CrawlActionError):
        services.crawl_update(crawl=crawl, user=user, name="x", seeds=crawl.seeds)

    lines = services.crawl_change_live(
        crawl=crawl, user=user, max_pages=7, host_delay=0.5, host_concurrency=2, max_depth=1
    ).lines
    assert "max pages: 1000 -> 7" in lines
    config = {
        k.decode(): v.decode()
        for k, v in Frontier(crawl.pk).redis.hgetall(f"ch:{{c{crawl.pk}}}:config").items()
    }
    assert (
        config["max_pages"],
        config["host_delay_ms"],
        config["host_concurrency"],
        config["max_depth"],
    ) == ("7", "500", "2", "1")
    event = crawl.events.get(kind=CrawlEvent.Kind.CHANGED)
    assert event.user == user and "host delay: none -> 0.5" in event.detail
    services.crawl_cancel(crawl=crawl, user=user)


def test_a_lowered_max_pages_caps_a_running_crawl(user, make_site):
    site = make_site(pages_site(chain_site(40)))
    crawl = start_site_crawl(user, site, max_pages=1000, threads=1, max_depth=100)
    services.crawl_change_live(crawl=crawl, user=user, max_pages=6)
    crawl = drive(crawl)
    assert crawl.state == CrawlState.FINISHED
    assert crawl.stats["requests"] == 6
    assert Page.objects.filter(crawl=crawl).count() == 6


def test_fewer_slices_take_effect_as_slices_end(user, make_site):
    site = make_site(pages_site(chain_site(3)))
    crawl = start_site_crawl(user, site, slices=3)
    services.crawl_change_live(crawl=crawl, user=user, slices=1)
    frontier = Frontier(crawl.pk)
    frontier.slice_register(["other"], ttl=60)  # one slice still running elsewhere
    before = frontier.redis.zcard(f"ch:{{c{crawl.pk}}}:slices")
    jobs.after_slice(crawl.pk)  # a slice ended: no successor, another one runs
    assert frontier.redis.zcard(f"ch:{{c{crawl.pk}}}:slices") == before
    services.crawl_cancel(crawl=crawl, user=user)


def test_delete_cancels_a_running_crawl_and_removes_its_rows_and_keys(
    user, staff, make_site, django_capture_on_commit_callbacks
):
    site = make_site(pages_site(chain_site(3)))
    crawl = drive(start_site_crawl(user, site))
    running = start_site_crawl(user, site)
    pk = running.pk
    with django_capture_on_commit_callbacks(execute=True):
        record = services.crawl_delete(crawl=running, user=staff)
    assert record.user == staff and record.owner_id == user.pk
    assert not Crawl.objects.filter(pk=pk).exists()
    frontier = Frontier(pk)
    keys = list(frontier.redis.scan_iter(match=f"ch:{{c{pk}}}:*"))
    assert keys == [f"ch:{{c{pk}}}:state".encode()]  # "cancelled" for slices still finishing
    assert frontier.state() == "cancelled"
    assert 0 < frontier.redis.pttl(f"ch:{{c{pk}}}:state") <= services.RETIRED_STATE_SECONDS * 1000
    assert CrawlDeletion.objects.filter(crawl_id=pk, state=CrawlState.CANCELLED).exists()
    # The other crawl is untouched.
    assert Crawl.objects.filter(pk=crawl.pk).exists() and crawl.pages.count() > 0
