"""A crawl's slices run in a process of their own, as a worker's job process runs them, to
measure what that process holds at its highest.

    measured = slice_process.peak_rss(crawl.pk, env=...)   # python -m tests.support.slice_process

The child runs the crawl's slices one after another until it ends (tests.support.crawling.drive)
and prints its peak RSS (VmHWM: the whole process, Python and Django included). Not getrusage's
ru_maxrss: Linux carries that over an exec, so a child started by a big process reports the
parent's size.
Its address space is capped (ADDRESS_SPACE_CAP), so that a regression fails with a MemoryError
in the child instead of taking the machine's memory.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from pathlib import Path

from tests.support import processes

ROOT = Path(__file__).resolve().parents[2]
ADDRESS_SPACE_CAP = 3 * 1024**3


def peak_rss(crawl_id: int, *, env: dict[str, str], timeout: float = 120) -> dict:
    """Run the crawl's slices in a child until the crawl ends: {"peak_rss": bytes, "state"}."""
    result = processes.run(
        [sys.executable, "-m", "tests.support.slice_process", str(crawl_id)],
        cwd=ROOT,
        env=env,
        timeout=timeout,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise AssertionError(f"the slice process exited {result.returncode}:\n{result.stderr}")
    return json.loads(result.stdout.splitlines()[-1])


def main(crawl_id: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_CAP, ADDRESS_SPACE_CAP))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crawlhub.settings")
    import django

    django.setup()  # then what needs Django's settings
    from crawls.models import Crawl
    from tests.support.crawling import drive

    crawl = drive(Crawl.objects.get(pk=crawl_id), timeout=100, budget=10)
    print(json.dumps({"peak_rss": peak_rss_of_this_process(), "state": crawl.state}))


def peak_rss_of_this_process() -> int:
    """VmHWM, in bytes: the most this process has had in RAM since it started (its exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024  # kB
    raise AssertionError("no VmHWM in /proc/self/status")


if __name__ == "__main__":
    main(int(sys.argv[1]))
