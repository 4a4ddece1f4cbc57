"""A crawl's log: what its workers did, line by line, from real crawls of local sites (a host
that pushes back, a dead host, a page that keeps failing, a login), what the frontier's scripts
saw (a host parked, and asked again), the bound, the filters and the paging."""

from __future__ import annotations

import time

import pytest
from django.core.exceptions import ValidationError

from crawls import services
from crawls.engine import crawl_log, lifecycle
from crawls.engine.crawl_log import SLICE_LINES, SliceLog, trim
from crawls.engine.crawl_settings import CannotStart
from crawls.engine.frontier import Frontier
from crawls.engine.recording import Result
from crawls.engine.request import Outcome, Request
from crawls.engine.slices import run_slice
from crawls.logs import LogFilter, log_page
from crawls.models import Crawl, CrawlEvent, CrawlState
from tests.engine.test_crawling_behind_a_login import login_auth, start, tree
from tests.support.crawling import drive, make_crawl
from tests.support.sites import LoginSite, Response, free_port, pages_site

Kind, Level = CrawlEvent.Kind, CrawlEvent.Level
pytestmark = pytest.mark.django_db


def lines(crawl: Crawl, **filters) -> list[CrawlEvent]:
    """The crawl's log, oldest first."""
    return list(crawl.events.filter(**filters).order_by("id"))


def texts(crawl: Crawl, **filters) -> list[str]:
    return [f"{e.host} {e.detail}".strip() for e in lines(crawl, **filters)]


def counted(found: list[CrawlEvent]) -> dict[tuple[str, str], int]:
    """Lines of "<n> request(s) <what>" summed per host and what."""
    sums: dict[tuple[str, str], int] = {}
    for e in found:
        n, _, what = e.detail.partition(" ")
        what = what.removeprefix("requests ").removeprefix("request ")
        sums[e.host, what] = sums.get((e.host, what), 0) + int(n)
    return sums


def test_a_crawl_logs_its_slices_a_host_pushing_back_a_dead_host_and_retries_given_up(
    user, make_site, quick_slices
):
    dead = f"127.0.0.1:{free_port()}"  # nothing listens: every request is refused
    answered = {"busy": 0}

    def handler(request):
        if request.path == "/busy":
            answered["busy"] += 1
            if answered["busy"] == 1:
                return Response(status=429, body="slow down", headers={"Retry-After": "0"})
        if request.path == "/broken":
            return Response(status=500, body="oops")
        return pages_site(
            {
                "/": f'<a href="/busy">b</a> <a href="/broken">x</a> <a href="http://{dead}/gone">d</a>',
                "/busy": "fine now",
            }
        )(request)

    site = make_site(handler)
    here = site.url.split("://", 1)[1]
    crawl = services.crawl_create(
        user=user,
        name="log",
        seeds=[site.url + "/", f"http://{dead}/"],
        obey_robots=False,
        max_retries=1,
        threads=2,
    )
    services.crawl_start(crawl=crawl, user=user)
    crawl = drive(crawl, timeout=90, budget=3)
    assert crawl.state == CrawlState.FINISHED, crawl.end_line

    slices = texts(crawl, kind=Kind.SLICE)
    assert slices[0].startswith("slice test-1 started: 2 requests claimed"), slices
    ended = [text for text in slices if " ended after " in text]
    assert ended and all("page" in text for text in ended), slices
    assert sum(int(t.split(": ", 1)[1].split(" page")[0]) for t in ended) == crawl.pages.count()

    [slowed] = lines(crawl, kind=Kind.SLOWED, level=Level.WARNING)
    assert slowed.host == here
    assert slowed.detail == "slowed to one request every 1 s: it answered HTTP 429, Retry-After 0 s"

    # Errors with their reason, per host (however the slices' windows split them): retried
    # first, then given up to the failure queue.
    everything = "\n".join(texts(crawl))
    assert counted(lines(crawl, kind=Kind.ERROR)) == {
        (dead, "failed, tried again later: connection refused"): 2,  # the seed and its link
        (here, "failed, tried again later: HTTP 429"): 1,
        (here, "failed, tried again later: HTTP 500"): 1,
    }, everything
    assert {e.level for e in lines(crawl, kind=Kind.ERROR)} == {Level.WARNING}
    assert counted(lines(crawl, kind=Kind.GAVE_UP)) == {
        (dead, "given up after 2 attempts, to the failure queue: connection refused"): 2,
        (here, "given up after 2 attempts, to the failure queue: HTTP 500"): 1,
    }, everything
    assert {e.level for e in lines(crawl, kind=Kind.GAVE_UP)} == {Level.ERROR}
    assert crawl.failures.count() == 3

    # The audit trail's lines are in the same timeline: started by the user, finished.
    kinds = [e.kind for e in lines(crawl)]
    assert kinds[:2] == [Kind.CREATED, Kind.STARTED] and kinds[-1] == Kind.FINISHED
    assert lines(crawl)[-1].detail == crawl.end_line
    assert crawl.events.get(kind=Kind.STARTED).user == user


def test_a_login_and_its_renewals_are_logged(user, make_site):
    login = LoginSite(tree(), expire_after=7)
    site = make_site(login)
    crawl = drive(start(user, site, auth=login_auth(site)))
    assert crawl.state == CrawlState.FINISHED, crawl.error
    logins = lines(crawl, kind=Kind.LOGIN)
    host = site.url.split("://", 1)[1]
    assert len(logins) == login.logins >= 3
    assert {e.host for e in logins} == {host} and {e.level for e in logins} == {Level.INFO}
    assert logins[0].detail == f"logged in at {site.url}/login (session 1)"
    assert logins[1].detail == (
        f"the session expired: logged in again at {site.url}/login (session 2)"
    )


def test_a_failed_login_is_an_error_line_of_the_log(user, make_site):
    site = make_site(LoginSite(tree()))
    auth = {**login_auth(site), "login_fields": "username=someone\npassword=wrong"}
    crawl = start(user, site, auth=auth)
    with pytest.raises(CannotStart) as caught:  # the slice cannot start
        run_slice(crawl.pk, "s1")
    lifecycle.fail(crawl.pk, str(caught.value))  # as its job does
    crawl.refresh_from_db()
    assert crawl.state == CrawlState.FAILED
    [failed] = lines(crawl, kind=Kind.LOGIN)
    assert failed.level == Level.ERROR
    assert failed.detail.startswith("the login failed: the login did not succeed")
    assert "wrong" not in failed.detail  # never a secret
    assert lines(crawl)[-1].kind == Kind.FAILED


def test_a_parked_host_and_its_release_come_back_from_the_scripts(user):
    crawl = make_crawl(user)
    frontier = Frontier(crawl.pk)
    frontier.configure(max_pages=0, max_depth=-1, host_delay=0, park_after=0.001, park_for=0.3)
    frontier.set_state("running")
    frontier.add_seeds([f"http://down.test/{n}" for n in range(12)] + ["http://up.test/"])
    down = [r for r in frontier.claim(9, lease_seconds=60) if r.host == "down.test"]
    assert frontier.complete([Outcome(request=r, kind="failed") for r in down[:3]]) == []
    time.sleep(0.01)  # failing for longer than park_after now
    events = frontier.complete([Outcome(request=r, kind="failed") for r in down[3:6]])
    assert [(e.kind, e.host) for e in events] == [("parked", "down.test")]
    assert events[0].text.startswith("parked: none of its last 6 requests got an answer in 0 s")
    assert events[0].text.endswith("; held for 0 s")  # 0.3 s, in whole seconds
    time.sleep(0.35)
    released = []
    assert frontier.claim_ahead(5, lease_seconds=60, events=released)
    assert [(e.kind, e.host, e.text) for e in released] == [
        ("released", "down.test", "its parking ended")
    ]

    log = SliceLog(crawl.pk, "s1")
    log.host_events(events + released)
    crawl_log.write(log.take())
    assert [(e.kind, e.level, e.host) for e in lines(crawl, user=None)] == [
        (Kind.PARKED, Level.WARNING, "down.test"),
        (Kind.HOST_RELEASED, Level.INFO, "down.test"),
    ]
    assert lines(crawl, kind=Kind.HOST_RELEASED)[0].detail == "asked again: its parking ended"


def test_errors_of_a_host_are_told_at_once_then_at_most_every_few_seconds(user):
    crawl = make_crawl(user)
    log = SliceLog(crawl.pk, "s1")

    def failing(n: int) -> list[Result]:
        return [
            Result(
                request=Request(url=f"http://a.test/{k}"),
                outcome=Outcome(
                    request=Request(url=f"http://a.test/{k}"),
                    kind="retry",
                    error="connection refused",
                ),
            )
            for k in range(n)
        ]

    log.count_errors(failing(4))
    [told] = log.take()
    assert (told.kind, told.host, told.level) == (Kind.ERROR, "a.test", Level.WARNING)
    assert told.detail == "4 requests failed, tried again later: connection refused"
    for _ in range(20):  # batch after batch within ERROR_EVERY_SECONDS: one line for them all
        log.count_errors(failing(5))
        assert log.take() == []
    [told] = log.take(force=True)  # the slice ends
    assert told.detail == "100 requests failed, tried again later: connection refused"


def test_a_slice_writes_a_bounded_number_of_lines_and_says_how_many_it_left_out(user):
    crawl = make_crawl(user)
    log = SliceLog(crawl.pk, "s1")
    log.started = True
    for n in range(SLICE_LINES + 30):
        log.note(Kind.SLOWED, f"line {n}", host="a.test")
    # Errors of many hosts are lines too, within the same bound.
    log.count_errors(
        [
            Result(request=request, outcome=Outcome(request=request, kind="retry", error="timeout"))
            for request in (Request(url=f"http://h{n}.test/") for n in range(5))
        ]
    )
    log.slice_ended(pages=0, reason="budget", seconds=1.0, handed_back=0)
    assert crawl.events.filter(kind=Kind.SLOWED).count() == SLICE_LINES
    assert not crawl.events.filter(kind=Kind.ERROR).exists()
    [end] = lines(crawl, kind=Kind.SLICE)
    assert end.detail.endswith("its time was up; 35 more lines of its log left out")


def test_the_log_keeps_the_newest_lines_of_each_level_and_counts_what_it_removed(user):
    crawl = make_crawl(user)
    for n in range(30):
        crawl_log.write([crawl_log.line(crawl.pk, Kind.SLICE, f"info {n}")])
    crawl_log.write(
        [
            crawl_log.line(crawl.pk, Kind.PARKED, f"warning {n}", level=Level.WARNING)
            for n in range(3)
        ]
    )
    services.crawl_start(crawl=crawl, user=user)  # an audit line, after them all
    assert trim(crawl.pk, keep=10) == 20
    crawl.refresh_from_db()
    assert crawl.log_removed == 20
    assert texts(crawl, kind=Kind.SLICE) == [f"info {n}" for n in range(20, 30)]
    assert len(lines(crawl, level=Level.WARNING)) == 3  # not pushed out by routine lines
    assert [e.kind for e in lines(crawl, user=user)] == [Kind.CREATED, Kind.STARTED]
    assert trim(crawl.pk, keep=10) == 0


def test_deleting_a_crawl_removes_its_log(user):
    crawl = make_crawl(user)
    crawl_log.write([crawl_log.line(crawl.pk, Kind.SLICE, "a line")])
    services.crawl_delete(crawl=crawl, user=user)
    assert not CrawlEvent.objects.filter(crawl_id=crawl.pk).exists()


@pytest.fixture
def logged(user) -> Crawl:
    """A crawl whose log holds lines of every level, kind and a few hosts."""
    crawl = make_crawl(user)
    write = crawl_log.write
    write([crawl_log.line(crawl.pk, Kind.SLICE, f"slice s{n} started") for n in range(3)])
    write(
        [crawl_log.line(crawl.pk, Kind.SLOWED, "slowed to 2 s", host="a.test", level=Level.WARNING)]
    )
    write(
        [
            crawl_log.line(
                crawl.pk,
                Kind.GAVE_UP,
                "3 requests given up: Timeout",
                host="b.test",
                level=Level.ERROR,
            )
        ]
    )
    services.crawl_start(crawl=crawl, user=user)
    return crawl


def test_the_log_is_filtered_by_level_kind_host_and_text(logged, user):
    def shown(**params) -> list[str]:
        return [e.detail or e.kind for e in log_page(logged, LogFilter.from_params(params)).lines]

    assert shown()[:2] == ["started", "3 requests given up: Timeout"]  # newest first
    assert len(shown()) == 7
    assert shown(level="warning") == ["3 requests given up: Timeout", "slowed to 2 s"]
    assert shown(level="error") == ["3 requests given up: Timeout"]
    assert shown(kind="slices") == [f"slice s{n} started" for n in (2, 1, 0)]
    assert shown(kind="actions") == ["started", "created"]
    assert shown(kind="hosts", host="A.TEST") == ["slowed to 2 s"]
    assert shown(host="b.te") == ["3 requests given up: Timeout"]
    assert shown(q="TIMEOUT") == ["3 requests given up: Timeout"]
    assert shown(kind="gave_up") == ["3 requests given up: Timeout"]
    with pytest.raises(ValidationError) as caught:
        LogFilter.from_params({"level": "loud", "kind": "nope", "q": "x" * 300})
    assert set(caught.value.message_dict) == {"level", "kind", "q"}


def test_the_log_is_paged_by_key_and_a_live_view_asks_what_came_since(logged):
    everything = log_page(logged, LogFilter())
    first = log_page(logged, LogFilter(), size=3)
    assert [e.pk for e in first.lines] == [e.pk for e in everything.lines[:3]]
    second = log_page(logged, LogFilter(), before=first.older, size=3)
    assert [e.pk for e in second.lines] == [e.pk for e in everything.lines[3:6]]
    newest = everything.lines[0].pk
    assert log_page(logged, LogFilter(), after=newest).lines == []
    crawl_log.write([crawl_log.line(logged.pk, Kind.SLICE, "slice s9 started")])
    assert [e.detail for e in log_page(logged, LogFilter(), after=newest).lines] == [
        "slice s9 started"
    ]
    with pytest.raises(ValidationError):
        log_page(logged, LogFilter(), before="abc")
