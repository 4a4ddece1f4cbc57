"""Helpers for the tests of `manage.py up`: its processes (/proc), its answers, its output."""

import json
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from crawlhub.redis.connections import REDIS_ERRORS
from tests.support.processes import children


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


def stat(pid: int) -> list[str]:
    """/proc/<pid>/stat after the command name: state, ppid, pgrp, session... ([] once gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return []


def zombies_below(pid: int) -> list[str]:
    """Processes below pid that ended and that nobody reaped. Each is read once: a zombie
    reaped between two reads would have no parent left to name."""
    states = ((p, stat(p)) for p in descendants(pid))
    return [f"{p} (parent {fields[1]})" for p, fields in states if fields[:1] == ["Z"]]


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
