"""Helpers for the tests of `manage.py up`: its processes (/proc), its answers, its output."""

import json
import subprocess
import time
import urllib.request
from pathlib import Path

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
