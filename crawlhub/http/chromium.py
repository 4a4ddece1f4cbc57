"""Finding the Chromium that renders JavaScript (rendering.py), without starting anything; and
the browsers that run under this process.

In this order: the CRAWLHUB_CHROMIUM setting (when set, it is the only place looked at: a
setting that points nowhere is a mistake to report, not to work around); the Chromium that
`playwright install chromium` downloaded; a `chromium` (or Chrome) on PATH, such as Debian's.
Playwright for Python itself must be importable too. Plain crawls need none of this.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import shutil
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

SETTING = "CRAWLHUB_CHROMIUM"
PLAYWRIGHT_PIN = "playwright==1.65.2"
INSTALL = (
    f"pip install {PLAYWRIGHT_PIN} && playwright install chromium "
    "(or the system's package: apt-get install chromium)"
)
ON_PATH = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# Inside Playwright's browsers folder: full Chromium builds, then the headless shell.
_PLAYWRIGHT_BUILDS = (
    "chromium-*/chrome-linux*/chrome",
    "chromium_headless_shell-*/chrome-linux*/headless_shell",
)


@dataclass(frozen=True)
class Chromium:
    """Where Chromium is (`path`), or why rendering cannot run (`problem`, with the fix)."""

    path: str = ""
    problem: str = ""

    def __bool__(self) -> bool:
        return bool(self.path)


def locate() -> Chromium:
    if importlib.util.find_spec("playwright") is None:
        return Chromium(
            problem=f"Playwright for Python is not installed. Install it: pip install "
            f"{PLAYWRIGHT_PIN}"
        )
    configured = getattr(settings, SETTING, "")
    if configured:
        if _runnable(configured):
            return Chromium(path=configured)
        return Chromium(
            problem=f"{SETTING} is {configured!r}, which is not an executable file. Point it "
            f"at Chromium, or leave it empty and install Chromium: {INSTALL}"
        )
    for path in [*_playwright_builds(), *filter(None, map(shutil.which, ON_PATH))]:
        if _runnable(path):
            return Chromium(path=path)
    return Chromium(
        problem=f"Chromium was not found ({SETTING} is empty, Playwright has no browser "
        f"installed, and there is no chromium on PATH). Install it: {INSTALL}"
    )


def _playwright_builds() -> list[str]:
    root = os.environ.get("PLAYWRIGHT_BROWSERS_PATH") or str(Path.home() / ".cache/ms-playwright")
    found: list[str] = []
    for pattern in _PLAYWRIGHT_BUILDS:
        found += sorted(glob.glob(os.path.join(root, pattern)), reverse=True)  # newest first
    return found


def _runnable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def driver_processes() -> set[int]:
    """The process ids of Playwright's drivers (node running `run-driver`) that are children of
    this process."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
                if parent == os.getpid() and b"run-driver" in _cmdline(int(entry)):
                    found.add(int(entry))
    return found


def kill_left(pids: Iterable[int], *, marker: bytes) -> list[int]:
    """Kill those of `pids` still running whose command line holds `marker` (a process id
    reused since is left alone); the ones killed."""
    killed = []
    for pid in pids:
        if marker in _cmdline(pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
    return killed


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read()
    except OSError:
        return b""


def browser_processes() -> set[int]:
    """The process ids of the browsers this process runs: a Chromium whose parent is not one
    (its own helpers are its children), under this process (Playwright does not tell them)."""
    names: dict[int, tuple[str, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                with open(f"/proc/{entry}/stat") as stat:
                    head, tail = stat.read().rsplit(")", 1)
                names[int(entry)] = (head.split("(", 1)[1], int(tail.split()[1]))

    def is_browser(name: str) -> bool:
        return "chrom" in name or "headless_shell" in name

    def under_me(pid: int) -> bool:
        for _ in range(8):
            pid = names.get(pid, ("", 0))[1]
            if pid == os.getpid():
                return True
            if pid <= 1:
                return False
        return False

    return {
        pid
        for pid, (name, parent) in names.items()
        if is_browser(name) and not is_browser(names.get(parent, ("", 0))[0]) and under_me(pid)
    }
