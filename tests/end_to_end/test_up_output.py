"""What an idle `up` prints: a summary of its routine jobs a minute rather than RQ's lines
for every one (some 130 a minute), and the way in again until someone logs in."""

import re
import shutil
import signal
import subprocess
import time

import pytest

from tests.end_to_end.test_up import ROOT, log_in
from tests.support.up import child_pids, wait_for_output, wait_for_workers

pytestmark = pytest.mark.once

ROUTINE = re.compile(
    r"INFO rq\.(worker|cron): (Worker \w+: (control|crawls|default): |"
    r"Successfully completed|Worker \w+: job .* result is kept|Enqueued job)"
)


@pytest.mark.slow
def test_an_idle_up_sums_up_its_routine_jobs_and_repeats_how_to_log_in(start_up):
    proc, base, log = start_up(CRAWLHUB_LOG_SUMMARY_SECONDS="6", CRAWLHUB_LOGIN_HINT_SECONDS="5")
    wait_for_workers(base, 2, log)
    printed = wait_for_output(proc, log, "crawlhub is up at")
    password = re.search(r"Created admin user 'admin' with password (\S+)", printed)[1]
    time.sleep(16)  # the supervisor runs every 3 s: some 5 runs, each 5 lines before
    printed = log.read_text()
    routine = [line for line in printed.splitlines() if ROUTINE.search(line)]
    assert routine == [], "\n".join(routine[:5])
    summaries = re.findall(r"INFO crawlhub\.activity: the last \d+ s \(pid (\d+)\): (.*)", printed)
    assert summaries and any(re.search(r"\d+ jobs run \(supervise \d+", s) for _, s in summaries)
    # From the workers and the cron process themselves: never from the work horse a worker
    # forks for each job (its copy of the counts would sum up its one job, each time).
    assert {int(pid) for pid, _ in summaries} <= set(child_pids(proc.pid)), summaries
    reminders = printed.count("Nobody has logged in yet: open " + base + "/")
    assert reminders >= 2, printed
    assert printed.count(f"Created admin user 'admin' with password {password}") == reminders + 1

    log_in(base, "admin", password)
    time.sleep(7)
    assert log.read_text().count("Nobody has logged in yet") in (reminders, reminders + 1)
    settled = log.read_text().count("Nobody has logged in yet")
    time.sleep(6)
    assert log.read_text().count("Nobody has logged in yet") == settled  # no more after a login
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


@pytest.mark.slow
def test_the_first_run_says_it_is_installing_before_the_long_silent_part(tmp_path):
    """`./run up` on a fresh clone used to install for minutes without a word. Here a stand-in
    interpreter plays .venv's python (pip and manage.py both just print what they were asked),
    so that the script's own words are what is tested."""
    for name in ("run", "requirements.lock", "requirements-test.lock"):
        shutil.copy(ROOT / name, tmp_path / name)
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text('#!/bin/sh\necho "python $*"\n')
    python.chmod(0o755)

    def run() -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(tmp_path / "run"), "up"], cwd=tmp_path, capture_output=True, text=True, timeout=60
        )

    first = run()
    assert first.returncode == 0, first.stderr
    assert first.stderr.startswith(
        "First run: installing crawlhub's packages into .venv (once; a few minutes"
    ), first.stderr
    assert re.search(r"^Installed in \d+ s\.$", first.stderr, re.M), first.stderr
    assert "python -m pip install" in first.stdout and "python manage.py up" in first.stdout
    again = run()
    assert again.stderr == "" and "pip" not in again.stdout  # installed: nothing to say
