"""`up` running crawls that render JavaScript: the browsers' processes are reaped however many
slices ran (Chromium's helpers outlive the browser that started them and become children of
`up`, its subreaper), and `up` stops within seconds of SIGTERM with a page being rendered,
leaving no process behind."""

from __future__ import annotations

import pytest

from crawls import services
from crawls.models import CrawlState
from tests.support.crawling import wait_for_state
from tests.support.sites import script_site
from tests.support.up import alive, assert_no_zombie_stays, descendants, stop_up, zombies_below

pytestmark = [
    pytest.mark.once,
    pytest.mark.slow,
    pytest.mark.browser,
    pytest.mark.usefixtures("needs_chromium"),
]


def start_rendered_crawl(user, site, **options):
    crawl = services.crawl_create(
        user=user,
        name="rendered",
        seeds=[site.url + "/"],
        obey_robots=False,
        threads=2,
        slices=1,
        render_javascript=True,
        **options,
    )
    services.crawl_start(crawl=crawl, user=user)
    return crawl


@pytest.mark.django_db(transaction=True)
def test_rendering_slices_under_up_leave_no_zombie(crawl_on_up, user, make_site):
    proc, base, log, url = crawl_on_up()
    site = make_site(script_site(3))
    for _ in range(3):
        crawl = wait_for_state(start_rendered_crawl(user, site), {CrawlState.FINISHED}, timeout=180)
        assert crawl.stats["responses"] == 4
    print(f"zombies below up right after 3 rendered crawls: {zombies_below(proc.pid)}")
    assert_no_zombie_stays(proc.pid, log)
    seen = descendants(proc.pid)
    stop_up(proc, log)
    assert [pid for pid in seen if alive(pid)] == []
