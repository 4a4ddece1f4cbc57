"""`manage.py up` brings up web, workers and Redis, and Ctrl-C leaves no process behind."""

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import requests
from django.core.management.base import CommandError

from crawlhub import launcher, process_group
from crawlhub.connections import REDIS_ERRORS
from crawlhub.management.commands.up import (
    child_env,
    ensure_admin,
    served_url,
    wait_until_served,
)
from crawls.engine.frontier import Frontier
from crawls.models import CrawlState
from tests.support import processes
from tests.support.crawling import (
    FAST_WORKERS,
    assert_exact,
    database_url,
    start_sample_crawl,
    use_redis,
    wait_for_state,
)
from tests.support.processes import children
from tests.support.sites import Response, free_port

ROOT = Path(__file__).resolve().parents[2]


def descendants(pid: int) -> set[int]:
    """Every live process below pid."""
    found, todo = set(), [pid]
    while todo:
        for child in children(todo.pop()):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def get_json(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def child_pids(pid: int) -> list[int]:
    """The live processes whose parent is pid."""
    return [child for child in children(pid) if alive(child)]


def command_line(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_text().rstrip("\0").split("\0")


def environment(pid: int) -> dict[str, str]:
    pairs = Path(f"/proc/{pid}/environ").read_bytes().decode().rstrip("\0").split("\0")
    return dict(pair.split("=", 1) for pair in pairs if "=" in pair)


def log_in(base: str, username: str, password: str) -> requests.Session:
    session = requests.Session()
    form = session.get(base + "/login/", timeout=30).text
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
    answer = session.post(
        base + "/login/",
        data={"username": username, "password": password, "csrfmiddlewaretoken": token},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    assert answer.url == base + "/", f"{username!r} could not log in: ended at {answer.url}"
    assert "Log out" in answer.text
    return session


def wait_for_workers(base: str, count: int, log: Path) -> None:
    """Until /healthz reports `count` workers: refused, reset, timed out or not yet JSON (up is
    still starting) all mean "not yet"."""
    report, status = {}, 0
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            status, report = get_json(base + "/healthz")
            if status == 200 and report["workers"]["count"] == count:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.3)
    raise AssertionError(
        f"up did not report {count} workers at {base}/healthz within 120 s: it answered "
        f"{status} {report}; up printed:\n{log.read_text()}"
    )


def wait_for_output(proc: subprocess.Popen, log: Path, text: str) -> str:
    """up's output once it holds `text`, or once up has exited."""
    deadline = time.monotonic() + 120
    while text not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return log.read_text()


@pytest.fixture
def start_up(tmp_path):
    """Run `manage.py up` on a free port with a fresh data dir; its output goes to a file. Each
    is stopped after the test (SIGTERM: `up` stops its children), then anything left killed."""
    started = []

    def start(workers: int = 2, **env: str) -> tuple[subprocess.Popen, str, Path]:
        full = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
        full.pop("PROXY_CHECK_URL", None)
        full.update(CRAWLHUB_DATA_DIR=str(tmp_path / "data"), PYTHONUNBUFFERED="1", **env)
        port = free_port()
        log = tmp_path / "up.log"
        up = ["manage.py", "up", "--port", str(port), "--workers", str(workers)]
        with log.open("w") as out:
            proc = processes.spawn(
                [sys.executable, *up], cwd=ROOT, env=full, stdout=out, stderr=subprocess.STDOUT
            )
        started.append(proc)
        return proc, f"http://127.0.0.1:{port}", log

    yield start
    processes.stop_all(started, timeout=60)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("stop_signal", "admin_password"),
    [(signal.SIGINT, ""), (signal.SIGTERM, "chosen-in-the-environment")],
    ids=["ctrl-c-generated-password", "sigterm-password-from-environment"],
)
def test_up_serves_the_dashboard_and_a_signal_stops_everything(
    start_up, stop_signal, admin_password
):
    proc, base, log = start_up(CRAWLHUB_ADMIN_PASSWORD=admin_password)
    wait_for_workers(base, 2, log)

    # up says so once its own request is answered, which may come just after ours.
    printed = wait_for_output(proc, log, "crawlhub is up at")
    assert f"crawlhub is up at {base}/" in printed
    if admin_password:
        assert "Log in as 'admin' with the password in CRAWLHUB_ADMIN_PASSWORD." in printed
        assert "Created admin user 'admin' with password" not in printed
        password = admin_password
    else:
        password = re.search(r"Created admin user 'admin' with password (\S+)", printed).group(1)
    log_in(base, "admin", password)

    workers = [pid for pid in child_pids(proc.pid) if "rqworker" in command_line(pid)]
    assert len(workers) == 2, [command_line(pid) for pid in workers]
    schedulers = [pid for pid in workers if "--with-scheduler" in command_line(pid)]
    assert len(schedulers) == 1, [command_line(pid) for pid in workers]
    # Proxy validation checks through this server's own echo endpoint, on the port it serves.
    assert environment(workers[0])["PROXY_CHECK_URL"] == f"{base}/proxies/echo"

    children = descendants(proc.pid)
    assert len(children) >= 5  # redis-server, 2 workers, cron, daphne
    proc.send_signal(stop_signal)
    proc.wait(timeout=60)
    output = log.read_text()
    assert proc.returncode == 0, output
    assert "Stopped." in output
    left = [pid for pid in children if alive(pid)]
    assert left == [], f"left behind: {left}"


@pytest.mark.slow
def test_up_says_it_is_up_only_once_the_web_server_answers(start_up):
    proc, base, log = start_up(workers=0)
    printed = wait_for_output(proc, log, "crawlhub is up at")
    assert f"crawlhub is up at {base}/" in printed
    answer = requests.get(base + "/healthz", timeout=10)  # at once: no retry, no wait
    assert answer.json()["database"]["ok"], answer.text
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert proc.returncode == 0, log.read_text()


@pytest.mark.slow
def test_up_stops_everything_when_the_web_server_exits_before_answering(start_up):
    proc, base, log = start_up(workers=0)
    web = None
    deadline = time.monotonic() + 60
    while web is None and proc.poll() is None and time.monotonic() < deadline:
        web = next((p for p in child_pids(proc.pid) if "daphne" in command_line(p)), None)
        time.sleep(0.01)
    assert web is not None, log.read_text()
    started = descendants(proc.pid)
    os.kill(web, signal.SIGKILL)  # daphne takes seconds to listen: it has not answered yet
    proc.wait(timeout=60)
    output = log.read_text()
    assert proc.returncode != 0, output
    assert "web (exit code -9) exited before answering at " + base + "/healthz" in output
    assert "crawlhub is up" not in output
    assert "Stopped." in output
    assert [pid for pid in started if alive(pid)] == []


@pytest.fixture
def group():
    """A ProcessGroup whose children are stopped after the test."""
    made = process_group.ProcessGroup(env=dict(os.environ))
    yield made
    made.stop(timeout=5)


def test_waiting_for_the_web_server_ends_at_its_first_answer_whatever_the_status(group, make_site):
    group.add("web", [sys.executable, "-c", "import time; time.sleep(60)"], restart=False)
    group.start()
    site = make_site(lambda request: Response(status=503, body="{}"))
    assert wait_until_served(group, "web", site.url + "/healthz", timeout=10) is True
    assert site.paths() == ["/healthz"]


def test_waiting_for_the_web_server_names_it_when_it_does_not_answer_in_time(group):
    group.add("web", [sys.executable, "-c", "import time; time.sleep(60)"], restart=False)
    group.start()
    url = f"http://127.0.0.1:{free_port()}/healthz"
    started = time.monotonic()
    said = f"web did not answer at {url} within 1 s; stopping"
    with pytest.raises(CommandError, match=f"^{re.escape(said)}$"):
        wait_until_served(group, "web", url, timeout=1)
    assert time.monotonic() - started < 10


def test_waiting_for_the_web_server_stops_when_it_exits(group):
    group.add("web", [sys.executable, "-c", "import sys; sys.exit(3)"], restart=False)
    group.start()
    url = f"http://127.0.0.1:{free_port()}/healthz"
    with pytest.raises(CommandError, match=r"^web \(exit code 3\) exited before answering at "):
        wait_until_served(group, "web", url, timeout=30)


@pytest.mark.slow
def test_a_child_that_keeps_dying_is_restarted_ever_more_slowly_and_the_log_says_so(group, caplog):
    group.FIRST_DELAY = 0.2
    group.add("cron", [sys.executable, "-c", "import sys; sys.exit(3)"], restart=True)
    group.start()
    deadline = time.monotonic() + 60
    with caplog.at_level(logging.WARNING, logger="crawlhub.process_group"):
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


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:8123"),
        ("0.0.0.0", "http://127.0.0.1:8123"),
        ("::", "http://[::1]:8123"),
        ("::1", "http://[::1]:8123"),
        ("crawl.example.com", "http://crawl.example.com:8123"),
    ],
)
def test_served_url_is_where_this_machine_reaches_the_server(host, url):
    assert served_url(host, 8123) == url


def test_the_proxy_check_url_follows_the_served_address_unless_set():
    env = child_env({"PATH": "/bin"}, redis_url="redis://r", url="http://127.0.0.1:8123")
    assert env["PROXY_CHECK_URL"] == "http://127.0.0.1:8123/proxies/echo"
    assert env["REDIS_URL"] == "redis://r"
    assert env["PATH"] == "/bin"
    chosen = {"PROXY_CHECK_URL": "https://crawl.example.com/proxies/echo"}
    env = child_env(chosen, redis_url="redis://r", url="http://127.0.0.1:8123")
    assert env["PROXY_CHECK_URL"] == "https://crawl.example.com/proxies/echo"


def test_the_proxy_check_url_reaches_the_settings(tmp_path):
    env = child_env(
        {k: v for k, v in os.environ.items() if k != "PROXY_CHECK_URL"},
        redis_url="redis://127.0.0.1:1/0",
        url="http://127.0.0.1:8123",
    )
    env["CRAWLHUB_DATA_DIR"] = str(tmp_path / "data")
    show = "from crawlhub import settings; print(settings.PROXY_CHECK_URL)"
    result = subprocess.run(
        [sys.executable, "-c", show], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.stdout.strip() == "http://127.0.0.1:8123/proxies/echo", result.stderr


@pytest.mark.django_db
def test_later_runs_say_how_to_log_in(django_user_model, monkeypatch):
    monkeypatch.delenv("CRAWLHUB_ADMIN_USER", raising=False)
    monkeypatch.delenv("CRAWLHUB_ADMIN_PASSWORD", raising=False)
    first = ensure_admin()
    assert first.startswith("Created admin user 'admin' with password ")
    assert django_user_model.objects.get().is_superuser
    again = ensure_admin()
    assert again == (
        "Log in as an existing user; `./run changepassword admin` resets the password of the "
        "admin 'admin'."
    )
    assert django_user_model.objects.count() == 1


@pytest.mark.django_db
def test_the_first_admin_takes_its_name_and_password_from_the_environment(
    django_user_model, monkeypatch
):
    monkeypatch.setenv("CRAWLHUB_ADMIN_USER", "root")
    monkeypatch.setenv("CRAWLHUB_ADMIN_PASSWORD", "chosen-in-the-environment")
    said = ensure_admin()
    assert said == "Log in as 'root' with the password in CRAWLHUB_ADMIN_PASSWORD."
    assert "chosen-in-the-environment" not in said
    root = django_user_model.objects.get()
    assert (root.username, root.is_superuser) == ("root", True)
    assert root.check_password("chosen-in-the-environment")


@pytest.mark.django_db
def test_without_an_admin_later_runs_say_how_to_add_one(django_user_model):
    django_user_model.objects.create_user(username="ada", password="x" * 12)
    assert ensure_admin() == "Log in as an existing user; `./run createsuperuser` adds an admin."


@pytest.mark.slow
def test_up_refuses_a_port_in_use(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "CRAWLHUB_DATA_DIR": str(tmp_path / "data")}
        result = subprocess.run(
            [sys.executable, "manage.py", "up", "--port", str(port)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode != 0
    assert f"127.0.0.1:{port} is already in use" in result.stderr


@pytest.mark.skipif(not (ROOT / ".venv/bin/python").exists(), reason="./run has not set up .venv")
@pytest.mark.slow
def test_run_migrates_a_fresh_database_before_a_management_command(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env["CRAWLHUB_DATA_DIR"] = str(tmp_path / "data")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(ROOT / "run"), *args], cwd=ROOT, env=env, capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip

    listed = run("crawl", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == []
    stamp = (tmp_path / "data" / ".migrated").read_text()
    created = run("crawl", "create", "--name", "x", "--seed", "http://a.test/")
    assert created.returncode == 0, created.stderr
    assert json.loads(run("crawl", "list", "--json").stdout)[0]["name"] == "x"
    assert (tmp_path / "data" / ".migrated").read_text() == stamp  # migrated once


# -- supervision: what `up` does when one of its processes dies -----------------------------------


@pytest.fixture
def crawl_on_up(start_up, redis_server, tmp_path):
    """Start `up` on the test database with short leases and slices (plus env), and point this
    test's crawlhub (services, RQ, the frontier) at the Redis it started: (proc, base, log,
    redis_url). The test's Redis is the session's again afterwards."""

    def start(**env: str) -> tuple[subprocess.Popen, str, Path, str]:
        proc, base, log = start_up(DATABASE_URL=database_url(), **{**FAST_WORKERS, **env})
        wait_for_workers(base, 2, log)
        url = (tmp_path / "data" / "redis" / "address").read_text().strip()
        use_redis(url)
        return proc, base, log, url

    yield start
    use_redis(redis_server.url)


def wait_for(what: str, ready, log: Path, *, timeout: float = 60) -> float:
    """Seconds until ready() is true (a Redis error counts as not yet); fails naming `what`."""
    started = time.monotonic()
    while True:
        try:
            if ready():
                return time.monotonic() - started
        except REDIS_ERRORS:
            pass
        if time.monotonic() - started > timeout:
            raise AssertionError(
                f"{what}: not within {timeout:.0f} s; up printed:\n{log.read_text()}"
            )
        time.sleep(0.05)


def healthy(base: str) -> bool:
    try:
        status, report = get_json(base + "/healthz")
    except (OSError, ValueError):
        return False
    return status == 200 and report["ok"]


def stat(pid: int) -> list[str]:
    """/proc/<pid>/stat after the command name: state, ppid, pgrp, session... ([] once gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return []


def zombies_below(pid: int) -> list[str]:
    """Processes below pid that ended and that nobody reaped."""
    return [f"{p} (parent {stat(p)[1]})" for p in descendants(pid) if stat(p)[:1] == ["Z"]]


def assert_no_zombie_stays(pid: int, log: Path) -> None:
    """A process that just ended is a zombie until its parent reaps it, a moment later: fail
    only when no look within 10 s finds none."""
    deadline = time.monotonic() + 10
    while found := zombies_below(pid):
        assert time.monotonic() < deadline, f"zombies: {found}; up printed:\n{log.read_text()}"
        time.sleep(0.05)


def rq_workers(up: int) -> list[int]:
    return [p for p in child_pids(up) if "rqworker" in command_line(p)]


def stop_up(proc: subprocess.Popen, log: Path) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert proc.returncode == 0, log.read_text()


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
    [redis_pid] = [p for p in child_pids(proc.pid) if "redis-server" in command_line(p)[0]]

    done = frontier.stats()["responses"]
    os.kill(redis_pid, signal.SIGKILL)
    back = wait_for("Redis answers again", lambda: launcher.ping(url), log, timeout=30)
    ok = back + wait_for("/healthz says ok", lambda: healthy(base), log)
    moving = back + wait_for("the crawl goes on", lambda: frontier.stats()["responses"] > done, log)
    print(f"Redis killed: answers after {back:.2f} s, /healthz ok after {ok:.2f} s, "
          f"pages completed again after {moving:.2f} s")  # fmt: skip
    assert back < 10

    crawl = wait_for_state(crawl, {CrawlState.FINISHED}, timeout=180)
    assert_exact(crawl, site)
    printed = log.read_text()
    assert f"redis-server was killed by SIGKILL; starting it again at {url}" in printed
    assert f"redis-server is back at {url}" in printed
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
    site, server, crawl = start_sample_crawl(user, make_site, pages=800, delay=0.2)
    # worker-1 runs RQ's scheduler in a process of its own besides its work horse.
    [worker] = [p for p in rq_workers(proc.pid) if "--with-scheduler" in command_line(p)]
    horse = slice_horse(worker, log)
    left = child_pids(worker)
    assert len(left) == 2, [command_line(p) for p in left]  # the horse and the scheduler
    seen = descendants(proc.pid)

    os.kill(worker, signal.SIGKILL)
    gone = wait_for(
        "the processes of the killed worker end", lambda: not any(map(alive, left)), log,
        timeout=10,
    )  # fmt: skip
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
