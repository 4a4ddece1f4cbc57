"""`manage.py up` brings up web, workers and Redis, and Ctrl-C leaves no process behind."""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parent.parent


def descendants(pid: int) -> set[int]:
    """Every live process below pid, found through /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
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
        with urllib.request.urlopen(url, timeout=3) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture
def up(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env.update(CRAWLHUB_DATA_DIR=str(tmp_path / "data"), CRAWLHUB_ADMIN_PASSWORD="")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "up", "--port", str(port), "--workers", "2"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    yield proc, f"http://127.0.0.1:{port}"
    if proc.poll() is None:
        proc.kill()
        proc.wait()


@pytest.mark.slow
def test_up_serves_the_dashboard_and_ctrl_c_stops_everything(up):
    proc, base = up
    report, status = {}, 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            status, report = get_json(base + "/healthz")
            if status == 200 and report["workers"]["count"] == 2:
                break
        except OSError:
            pass
        time.sleep(0.3)
    assert status == 200, report
    assert report["workers"]["count"] == 2
    with urllib.request.urlopen(base + "/login/", timeout=3) as page:
        assert b"Log in" in page.read()

    children = descendants(proc.pid)
    assert len(children) >= 5  # redis-server, 2 workers, cron, daphne
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, output
    assert "Created admin user 'admin' with password" in output
    assert "Stopped." in output
    left = [pid for pid in children if alive(pid)]
    assert left == [], f"left behind: {left}"


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
