"""What `up` does when one of its processes dies: Redis, a worker, the web server come back, a
child that keeps dying comes back ever more slowly, and nothing `up` started outlives it."""

import logging
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

from crawlhub.processes import launcher
from crawls.engine.frontier import Frontier
from crawls.models import CrawlState
from tests.support.crawling import assert_exact, start_sample_crawl, wait_for_state
from tests.support.up import (
    alive,
    assert_no_zombie_stays,
    child_pids,
    command_line,
    descendants,
    get_json,
    rq_workers,
    stat,
    stop_up,
    wait_for,
    wait_for_output,
)

# What it checks does not depend on the database: .ci/run runs it on SQLite only.
pytestmark = pytest.mark.once


def healthy(base: str) -> bool:
    try:
        status, report = get_json(base + "/healthz")
    except (OSError, ValueError):
        return False
    return status == 200 and report["ok"]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_up_brings_back_a_redis_killed_mid_crawl_and_the_crawl_ends_exactly(
    crawl_on_up, user, make_site
):
    proc, base, log, url = crawl_on_up()
    site, server, crawl = start_sample_crawl(user, make_site, pages=1000, delay=0.004)
    frontier = Frontier(crawl.pk)
    wait_for("200 pages", lambda: frontier.stats()["responses"] >= 200, log, timeout=120)
    seen = descendants(proc.pid)
    workers = rq_workers(proc.pid)
    [redis_pid] = [p for p in child_pids(proc.pid) if "redis-server" in command_line(p)[0]]

    done = frontier.stats()["responses"]
    os.kill(redis_pid, signal.SIGKILL)
    back = wait_for("Redis answers again", lambda: launcher.ping(url), log, timeout=30)
    ok = back + wait_for("/healthz says ok", lambda: healthy(base), log)
    moving = back + wait_for("the crawl goes on", lambda: frontier.stats()["responses"] > done, log)
    print(
        f"Redis killed: answers after {back:.2f} s, /healthz ok after {ok:.2f} s, "
        f"pages completed again after {moving:.2f} s"
    )
    assert back < 10

    crawl = wait_for_state(crawl, {CrawlState.FINISHED}, timeout=180)
    assert_exact(crawl, site)
    printed = log.read_text()
    assert f"redis-server was killed by SIGKILL; starting it again at {url}" in printed
    assert f"redis-server is back at {url}" in printed
    assert rq_workers(proc.pid) == workers, printed  # they waited for Redis: none died
    assert_no_zombie_stays(proc.pid, log)
    assert not alive(redis_pid)

    seen |= descendants(proc.pid)
    stop_up(proc, log)
    assert [pid for pid in seen if alive(pid)] == []


@pytest.mark.slow
def test_up_restarts_a_web_server_that_died_after_serving(start_up):
    proc, base, log = start_up(workers=0)
    assert f"crawlhub is up at {base}/" in wait_for_output(proc, log, "crawlhub is up at")
    seen = descendants(proc.pid)
    [web] = [p for p in child_pids(proc.pid) if "daphne" in command_line(p)]

    os.kill(web, signal.SIGKILL)
    back = wait_for("/healthz answers again", lambda: healthy(base), log)
    print(f"web server killed: /healthz ok again after {back:.2f} s")
    said = rf"web \(pid {web}\) was killed by SIGKILL after \d+ s; starting it again in 1 s"
    assert re.search(said, log.read_text())
    assert "web started again (pid " in log.read_text()
    assert proc.poll() is None

    seen |= descendants(proc.pid)
    stop_up(proc, log)
    assert [pid for pid in seen if alive(pid)] == []


def slice_horse(worker: int, log: Path) -> int:
    """The work horse of `worker` once it has run for a second (a slice, not a short job)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        # A horse leads a process group of its own (os.setpgrp); RQ's scheduler does not.
        horses = [p for p in child_pids(worker) if stat(p)[2:3] == [str(p)]]
        if horses:
            time.sleep(1)
            if alive(horses[0]) and horses[0] in child_pids(worker):
                return horses[0]
        time.sleep(0.05)
    raise AssertionError(
        f"worker {worker} ran no slice within 60 s; up printed:\n{log.read_text()}"
    )


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_up_replaces_a_killed_worker_and_nothing_the_worker_started_outlives_it(
    crawl_on_up, user, make_site
):
    # Slices of a minute: a horse left to itself would go on crawling long after its worker.
    proc, base, log, url = crawl_on_up(CRAWLHUB_SLICE_SECONDS="60")
    site, server, crawl = start_sample_crawl(user, make_site, pages=300, delay=0.2)
    # worker-1 runs RQ's scheduler in a process of its own besides its work horse.
    [worker] = [p for p in rq_workers(proc.pid) if "--with-scheduler" in command_line(p)]
    horse = slice_horse(worker, log)
    left = child_pids(worker)
    assert len(left) == 2, [command_line(p) for p in left]  # the horse and the scheduler
    seen = descendants(proc.pid)

    os.kill(worker, signal.SIGKILL)
    gone = wait_for(
        "the processes of the killed worker end",
        lambda: not any(map(alive, left)),
        log,
        timeout=10,
    )
    print(f"the killed worker's horse {horse} and scheduler ended {gone:.2f} s after it")

    def replaced() -> bool:
        now = rq_workers(proc.pid)
        return len(now) == 2 and worker not in now

    wait_for("a new worker in place of the killed one", replaced, log)
    restarted = "worker-1 started again (pid "
    wait_for("up says so", lambda: restarted in log.read_text(), log)
    said = rf"worker-1 \(pid {worker}\) was killed by SIGKILL after \d+ s; starting it again in 1 s"
    assert re.search(said, log.read_text())

    crawl = wait_for_state(crawl, {CrawlState.FINISHED}, timeout=180)
    assert_exact(crawl, site)
    assert_no_zombie_stays(proc.pid, log)
    seen |= descendants(proc.pid)
    stop_up(proc, log)
    assert [pid for pid in seen if alive(pid)] == []


@pytest.mark.slow
def test_a_child_that_keeps_dying_is_restarted_ever_more_slowly_and_the_log_says_so(group, caplog):
    group.FIRST_DELAY = 0.2
    group.add("cron", [sys.executable, "-c", "import sys; sys.exit(3)"], restart=True)
    group.start()
    deadline = time.monotonic() + 60
    with caplog.at_level(logging.WARNING, logger="crawlhub.processes.process_group"):
        while group.restarts.get("cron", 0) < 3:
            assert group.check() is None
            assert time.monotonic() < deadline, caplog.text
            time.sleep(0.02)
    said = r"cron \(pid \d+\) exited with code 3 after \d+ s; starting it again in ([\d.]+) s"
    assert re.findall(said, caplog.text)[:3] == ["0.2", "0.4", "0.8"]
    assert caplog.text.count("cron started again (pid ") == 3


@pytest.mark.slow
def test_stopping_the_group_ends_what_a_child_runs_in_a_process_group_of_its_own(group, tmp_path):
    # Like an RQ worker and its work horse: the worker does not stop in time, the horse has
    # left the worker's process group (os.setpgrp).
    started = tmp_path / "horse.pid"
    script = (
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "horse = os.fork()\n"
        "if horse == 0:\n"
        "    os.setpgrp()\n"
        "    time.sleep(120)\n"
        "    os._exit(0)\n"
        "open(sys.argv[1], 'w').write(str(horse))\n"
        "time.sleep(120)\n"
    )
    group.add("worker-1", [sys.executable, "-c", script, str(started)], restart=True)
    group.start()
    deadline = time.monotonic() + 30
    while not started.exists() or not started.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    horse = int(started.read_text())
    group.stop(timeout=0.5)
    while alive(horse):
        assert time.monotonic() < deadline, f"the horse {horse} outlived the group"
        time.sleep(0.02)
