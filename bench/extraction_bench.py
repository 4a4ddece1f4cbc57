"""What extraction rules cost a page, next to the link extraction every crawl already pays.

Renders the pages of `SampleSite(pages=2000)` (~4-6 KB of HTML each, ~25 links) in memory, then
times, in CPU time per page, the median of `--runs` passes over all of them:
- `Extractor.extract` with three CSS rules: the title's text, the <h1>'s text and every link's
  href (many=True), which builds the page's tree once;
- `Evaluator.extract`, the same rules as a slice runs them: their cost is linear in the page
  (crawls/engine/rule_cost.py), so they run in this process and no rule process starts;
- `Evaluator.extract` of the same three fields written as XPaths, which a slice runs in the
  rule process (crawls/engine/rule_process.py): the page sent and the fields read back
  through a pipe and shared memory. Its CPU is this process's and the rule process's together
  (psutil), once the process runs; with the wall time per page, and `Extractor.extract` of
  the XPaths in this process for comparison;
- `crawlhub.http.links.extract`, the title and links every crawled page goes through.

    .venv/bin/python bench/extraction_bench.py [--pages 2000] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from crawlhub.http import links  # noqa: E402
from crawlhub.sample_site import SampleSite  # noqa: E402
from crawls.engine.evaluator import Evaluator  # noqa: E402
from crawls.engine.extraction import Extractor, parse_rules  # noqa: E402

ORIGIN = "http://127.0.0.1:8080"
RULES = [
    {"name": "title", "kind": "css", "expr": "title::text"},
    {"name": "heading", "kind": "css", "expr": "h1"},
    {"name": "hrefs", "kind": "css", "expr": "a::attr(href)", "many": True},
]
XPATHS = [
    {"name": "title", "kind": "xpath", "expr": "//title/text()"},
    {"name": "heading", "kind": "xpath", "expr": "//h1"},
    {"name": "hrefs", "kind": "xpath", "expr": "//a/@href", "many": True},
]

Page = tuple[str, bytes, str]  # url, body, content type


def pages(count: int) -> list[Page]:
    site = SampleSite(pages=count)
    rendered = []
    for n in range(count):
        path = site.path_for(n)
        _, headers, body = site.render(path, origin=ORIGIN)
        rendered.append((ORIGIN + path, body, headers["Content-Type"]))
    return rendered


def per_page(
    work: Callable[[Page], object],
    site: list[Page],
    runs: int,
    *,
    also: psutil.Process | None = None,
) -> float:
    """Median over `runs` passes of the CPU seconds one page takes (in this process, and in
    `also` when given)."""
    times = []
    for _ in range(runs):
        started = time.process_time() + (cpu(also) if also else 0)
        for page in site:
            work(page)
        ended = time.process_time() + (cpu(also) if also else 0)
        times.append((ended - started) / len(site))
    return statistics.median(times)


def cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def wall_per_page(work: Callable[[Page], object], site: list[Page]) -> float:
    started = time.perf_counter()
    for page in site:
        work(page)
    return (time.perf_counter() - started) / len(site)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    site = pages(args.pages)
    extractor = Extractor(parse_rules(RULES))
    sample = extractor.extract(url=site[1][0], body=site[1][1], content_type=site[1][2])
    assert not sample.errors and all(sample.fields.values()), sample

    def link_extraction(page: Page) -> object:
        return links.extract(page[1], page[0], page[2])

    size = statistics.mean(len(body) for _, body, _ in site)
    print(f"{len(site):,} pages of {size / 1024:.1f} KB on average, median of {args.runs} runs")
    show("three CSS rules (Extractor.extract)", reader(extractor), site, args.runs)
    with Evaluator(parse_rules(RULES)) as evaluator:
        show("the same through Evaluator (here)", reader(evaluator), site, args.runs)
        assert not rule_processes(), "linear rules started a rule process"
    xpaths = Extractor(parse_rules(XPATHS))
    show("three XPath rules (Extractor.extract)", reader(xpaths), site, args.runs)
    with Evaluator(parse_rules(XPATHS)) as evaluator:
        bounded = reader(evaluator)
        assert bounded(site[1]).fields == sample.fields
        (process,) = rule_processes()
        show("the same in the rule process", bounded, site, args.runs, also=process)
    links_cost = per_page(link_extraction, site, args.runs)
    print(f"  {'link extraction (links.extract)':40} {links_cost * 1e6:8.1f} µs CPU per page")


def reader(extractor) -> Callable[[Page], object]:
    return lambda page: extractor.extract(url=page[0], body=page[1], content_type=page[2])


def show(label: str, work, site: list[Page], runs: int, also: psutil.Process | None = None):
    cost = per_page(work, site, runs, also=also)
    wall = wall_per_page(work, site)
    print(f"  {label:40} {cost * 1e6:8.1f} µs CPU per page ({wall * 1e6:.1f} µs wall)")


def rule_processes() -> list[psutil.Process]:
    return [
        child
        for child in psutil.Process().children()
        if "crawls.engine.rule_process" in child.cmdline()
    ]


if __name__ == "__main__":
    main()
