"""`up` stops within 10 s of SIGTERM whatever its workers are doing, leaving no process behind:
a page being rendered is given up and goes back to its crawl's queue, a proxy import hands over
after its batch; started again, `up` finishes both, nothing lost."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from crawls import services
from crawls.models import CrawlState, FailedRequest
from proxies import services as proxy_services
from proxies.models import ProxyJob
from tests.support.crawling import fetched_paths, wait_for_state
from tests.support.sites import Handler, Request, Response, free_port, script_site
from tests.support.up import alive, descendants, wait_for

pytestmark = [pytest.mark.once, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

STOPS_WITHIN = 10.0


def stopped_in(proc: subprocess.Popen, log: Path) -> float:
    """SIGTERM `up`; the seconds it took to exit (it must exit 0, with every child ended)."""
    seen = descendants(proc.pid)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    took = time.monotonic() - started
    printed = log.read_text()
    print(printed[printed.find("Stopping web") :])  # how the stop went, when run with -s
    assert proc.returncode == 0, printed
    assert [pid for pid in seen if alive(pid)] == [], log.read_text()
    return took


def held_api(handler: Handler, answer: threading.Event) -> Handler:
    """The site's API answers once `answer` is set (a page waits for it in the browser)."""

    def held(request: Request) -> Response:
        if request.path.startswith("/api/"):
            answer.wait(120)
        return handler(request)

    return held


@pytest.mark.browser
@pytest.mark.usefixtures("needs_chromium")
def test_up_stops_within_10_s_with_a_page_being_rendered_which_goes_back_to_the_queue(
    crawl_on_up, user, make_site
):
    answer = threading.Event()
    site = make_site(held_api(script_site(2), answer))
    proc, base, log, url = crawl_on_up()
    crawl = services.crawl_create(
        user=user,
        name="rendered",
        seeds=[site.url + "/"],
        obey_robots=False,
        threads=2,
        slices=1,
        render_javascript=True,
        timeout=60,
    )
    services.crawl_start(crawl=crawl, user=user)
    wait_for("a page being rendered", lambda: "/api/" in site.paths(), log, timeout=120)

    took = stopped_in(proc, log)
    print(f"up exited {took:.1f} s after SIGTERM, with a page being rendered")
    assert took < STOPS_WITHIN, log.read_text()

    # Started again, up renders the page it gave up, and the rest of the crawl.
    answer.set()
    crawl_on_up()
    crawl = wait_for_state(crawl, {CrawlState.FINISHED}, timeout=180)
    assert sorted(fetched_paths(crawl)) == ["/", "/p/0", "/p/1"]
    assert crawl.stats["responses"] == 3
    assert not FailedRequest.objects.filter(crawl=crawl).exists()


def loopback_proxies(count: int) -> str:
    """`count` distinct proxies on loopback addresses at a port nobody listens on: a check of
    one (validation follows an import) is refused at once, and goes nowhere else."""
    port = free_port()
    return "".join(
        f"127.{1 + n // 65536}.{n // 256 % 256}.{n % 256}:{port}\n" for n in range(count)
    )


def test_up_stops_within_10_s_with_a_proxy_import_running_which_goes_on_after(crawl_on_up, staff):
    # 40 batches: still under way when SIGTERM lands after the first, on a quick machine too;
    # a run that ignored SIGTERM would finish it before up's 6 s are out (done == total).
    lines = 20_000
    # No periodic validation pass on the control queue meanwhile: only the import's runs.
    quiet = {"PROXY_VALIDATE_EVERY": "86400"}
    proc, base, log, url = crawl_on_up(**quiet)
    job = proxy_services.start_import(text=loopback_proxies(lines), source="pasted", user=staff)
    wait_for("the import under way", lambda: refreshed(job).done > 0, log, timeout=120)

    took = stopped_in(proc, log)
    job.refresh_from_db()
    print(
        f"up exited {took:.1f} s after SIGTERM, with a proxy import running ({job.done:,} of "
        f"{lines:,} lines imported)"
    )
    assert took < STOPS_WITHIN, log.read_text()
    # Handed over after a batch (not killed holding the job): the next run takes it at once.
    assert (job.state, job.runner) == (ProxyJob.State.RUNNING, ""), job.error
    assert 0 < job.done < job.total == lines

    crawl_on_up(**quiet)
    wait_for("the import's end", lambda: refreshed(job).ended, log, timeout=200)
    assert job.state == ProxyJob.State.DONE, job.error
    assert (job.done, job.changed, job.duplicates, job.errors) == (lines, lines, 0, 0)


def refreshed(job: ProxyJob) -> ProxyJob:
    job.refresh_from_db()
    return job
