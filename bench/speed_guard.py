"""The speed guard: crawlhub against a bare `requests` crawler, interleaved, on one nginx site.

    .venv/bin/python bench/speed_guard.py                       # 3 rounds, 20,000 pages
    .venv/bin/python bench/speed_guard.py --runs 2 --base /tmp/speed-base   # before and after

Every round crawls the same generated site (bench/crawl_bench.py writes it and serves it with
nginx) with crawlhub (`manage.py up --workers 2`, 32 threads x 2 slices, no retries, no
robots.txt, as crawl_bench.py runs it) and then with bench/bare_crawler.py (plain `requests`, 32
threads); with --base, also with the crawlhub checked out there (a `git worktree` of the commit
before a change, say), followed by a bare run of its own. A machine whose speed drifts moves a
pair together, so the figure to read is the ratio of each crawlhub run to the bare run right
after it, and its median over the rounds: on a shared machine absolute pages/s mean little.

Every run is checked URL by URL against nginx's access log: each URL of `SampleSite.expected()`
asked exactly once, nothing else asked. A run that fails the check is marked, and its ratio is
left out. The load average is printed with every run. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from crawl_bench import ROOT, run_crawlhub, say, start_nginx  # noqa: E402
from w3lib.url import canonicalize_url  # noqa: E402

from crawlhub.processes.launcher import stop_process  # noqa: E402
from crawlhub.sample_site import SampleSite  # noqa: E402


@dataclass
class Run:
    tool: str  # "crawlhub", "base" or "bare"
    urls: int
    seconds: float
    load: float  # 1-minute load average when the run ended
    check: str  # "" when nginx's log holds exactly the expected URLs, once each
    cpu: float | None = None  # CPU seconds the crawl took (crawlhub: its processes and Redis)

    @property
    def cpu_ms(self) -> float:
        """CPU milliseconds per page: what a page costs, much less moved by the machine's load
        than pages/s (but blind to how many cores a crawler can use)."""
        return 1000 * self.cpu / self.urls if self.cpu and self.urls else 0.0

    @property
    def rate(self) -> float:
        return self.urls / self.seconds if self.seconds else 0.0


def log_check(log: Path, offset: int, expected: set[str]) -> tuple[str, int]:
    """What nginx logged since `offset`, against `expected`: "" when every expected URL was
    asked once and nothing else; else what was wrong. Also the new offset. URLs compare in
    w3lib's canonical form (a crawler sends a URL as it found it, `?b=6&a=7` say)."""
    with open(log, "rb") as lines:
        lines.seek(offset)
        text = lines.read()
    asked = Counter(
        canonicalize_url("http://x" + line.rsplit(b" ", 1)[0].decode())[len("http://x") :]
        for line in text.splitlines()
        if line
    )
    missing = expected - set(asked)
    extra = set(asked) - expected
    twice = sorted(url for url, n in asked.items() if n > 1)
    problems = []
    if missing:
        problems.append(f"{len(missing)} expected URLs never asked (e.g. {min(missing)})")
    if extra:
        problems.append(f"{len(extra)} unexpected URLs asked (e.g. {min(extra)})")
    if twice:
        problems.append(f"{len(twice)} URLs asked more than once (e.g. {twice[0]})")
    return "; ".join(problems), offset + len(text)


def run_bare(origin: str, threads: int, timeout: int) -> tuple[int, float, float]:
    done = subprocess.run(
        [sys.executable, str(BENCH / "bare_crawler.py"), origin + "/", "--threads", str(threads)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )
    found = json.loads(done.stdout)
    return len(found["fetched"]), found["seconds"], found["cpu"]


def table(runs: list[Run]) -> str:
    lines = [
        f"{'tool':<10}{'URLs':>8}{'seconds':>9}{'pages/s':>9}{'CPU ms/p':>9}{'load':>7}  check"
    ]
    for r in runs:
        lines.append(
            f"{r.tool:<10}{r.urls:>8}{r.seconds:>9.1f}{r.rate:>9.0f}{r.cpu_ms:>9.2f}"
            f"{r.load:>7.1f}  {r.check or 'ok'}"
        )
    return "\n".join(lines)


def ratios(runs: list[Run], tool: str, *, cpu: bool = False) -> list[float]:
    """Each `tool` run's pages/s over the bare run right after it (checked runs only); with
    `cpu`, the bare run's CPU per page over the tool's."""
    found = []
    for run, after in zip(runs, runs[1:], strict=False):
        if run.tool == tool and after.tool == "bare" and not run.check and not after.check:
            if not cpu:
                found.append(run.rate / after.rate)
            elif run.cpu_ms and after.cpu_ms:
                found.append(after.cpu_ms / run.cpu_ms)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--base", type=Path, help="a second checkout, run in every round too")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=32, help="per slice, and the bare ones")
    parser.add_argument("--slices", type=int, default=2)
    parser.add_argument("--timeout", type=int, default=900, help="seconds per crawl")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, site)")
    args = parser.parse_args()
    args.rules = False  # run_crawlhub's switch for extraction rules (crawl_bench.py --rules)

    site = SampleSite(pages=args.pages, seed=args.seed)
    expected = site.expected()
    folder = Path(tempfile.mkdtemp(prefix=f"speed-guard-{args.pages}-"))
    access = folder / "access.log"
    say(f"writing a {args.pages}-page site to {folder}")
    nginx, origin = start_nginx(site, folder, access_log=access)
    time.sleep(0.5)  # nginx logs its start-up check's request just after answering it
    offset = access.stat().st_size if access.exists() else 0
    checkouts = [("crawlhub", ROOT)] + ([("base", args.base.resolve())] if args.base else [])
    runs: list[Run] = []
    try:
        for round_ in range(1, args.runs + 1):
            for tool, root in checkouts:
                say(f"round {round_}: {tool} ({root})")
                result = run_crawlhub(site, origin, folder, args, root=root)
                check, offset = log_check(access, offset, expected)
                if result.note.startswith("MISMATCH"):
                    check = "; ".join(filter(None, [check, result.note]))
                load = os.getloadavg()[0]
                runs.append(Run(tool, result.urls, result.seconds, load, check, result.cpu))
                say(f"round {round_}: bare")
                urls, seconds, cpu = run_bare(origin, args.threads, args.timeout)
                check, offset = log_check(access, offset, expected)
                runs.append(Run("bare", urls, seconds, os.getloadavg()[0], check, cpu))
                print(table(runs[-2:]), flush=True)
                time.sleep(1)
    finally:
        stop_process(nginx)
        if not args.keep:
            subprocess.run(["rm", "-rf", str(folder)], check=False)

    print("\n" + table(runs))
    for tool, _ in checkouts:
        for what, cpu in (("pages/s", False), ("CPU per page, bare over", True)):
            found = ratios(runs, tool, cpu=cpu)
            if found:
                shown = ", ".join(f"{r:.2f}" for r in found)
                print(f"{what} {tool} / bare: {shown} (median {statistics.median(found):.2f})")
            else:
                print(f"{what} {tool} / bare: no checked pair")


if __name__ == "__main__":
    main()
