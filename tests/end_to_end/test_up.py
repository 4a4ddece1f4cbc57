"""`manage.py up` brings up web, workers and Redis, and Ctrl-C leaves no process behind."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from django.core.management.base import CommandError

from crawlhub.management.commands.up import (
    child_env,
    ensure_admin,
    served_url,
    wait_until_served,
)
from tests.support.sites import Response, free_port
from tests.support.up import (
    alive,
    child_pids,
    command_line,
    descendants,
    environment,
    wait_for_output,
    wait_for_workers,
)

# What it checks does not depend on the database: .ci/run runs it on SQLite only.
pytestmark = pytest.mark.once


ROOT = Path(__file__).resolve().parents[2]


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
@pytest.mark.timeout(900)  # three ./run calls, the first migrating: ~12 s of CPU, a busy machine
def test_run_migrates_a_fresh_database_before_a_management_command(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env["CRAWLHUB_DATA_DIR"] = str(tmp_path / "data")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(ROOT / "run"), *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=280,
        )

    listed = run("crawl", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == []
    stamp = (tmp_path / "data" / ".migrated").read_text()
    created = run("crawl", "create", "--name", "x", "--seed", "http://a.test/")
    assert created.returncode == 0, created.stderr
    assert json.loads(run("crawl", "list", "--json").stdout)[0]["name"] == "x"
    assert (tmp_path / "data" / ".migrated").read_text() == stamp  # migrated once
