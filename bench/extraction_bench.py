"""What extraction rules cost a page, next to the link extraction every crawl already pays.

Renders the pages of `SampleSite(pages=2000)` (~4-6 KB of HTML each, ~25 links) in memory, then
times, in CPU time per page, the median of `--runs` passes over all of them:
- `Extractor.extract` with three CSS rules: the title's text, the <h1>'s text and every link's
  href (many=True), which builds the page's tree once;
- `Evaluator.extract`, the same rules as a slice runs them: in the rule process
  (crawls/engine/rule_process.py), the page sent and the fields read back through pipes. Its
  CPU is this process's and the rule process's together (psutil), once the process runs; its
  wall time per page is printed too;
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

    def rules(page: Page) -> object:
        return extractor.extract(url=page[0], body=page[1], content_type=page[2])

    def link_extraction(page: Page) -> object:
        return links.extract(page[1], page[0], page[2])

    with Evaluator(parse_rules(RULES)) as evaluator:

        def bounded(page: Page) -> object:
            return evaluator.extract(url=page[0], body=page[1], content_type=page[2])

        assert bounded(site[1]) == sample, bounded(site[1])
        (process,) = [
            child for child in psutil.Process().children()
            if "crawls.engine.rule_process" in child.cmdline()
        ]  # fmt: skip
        bounded_cost = per_page(bounded, site, args.runs, also=process)
        bounded_wall = wall_per_page(bounded, site)
    size = statistics.mean(len(body) for _, body, _ in site)
    rules_cost = per_page(rules, site, args.runs)
    rules_wall = wall_per_page(rules, site)
    links_cost = per_page(link_extraction, site, args.runs)
    print(f"{len(site):,} pages of {size / 1024:.1f} KB on average, median of {args.runs} runs")
    print(f"  three CSS rules (Extractor.extract):  {rules_cost * 1e6:8.1f} µs CPU per page"
          f"  ({rules_wall * 1e6:.1f} µs wall)")  # fmt: skip
    print(f"  the same in the rule process:         {bounded_cost * 1e6:8.1f} µs CPU per page"
          f"  ({bounded_wall * 1e6:.1f} µs wall)")  # fmt: skip
    print(f"  link extraction (links.extract):      {links_cost * 1e6:8.1f} µs CPU per page")
    print(f"  the rules cost {rules_cost / links_cost:.2f}x the link extraction in this process, "
          f"{bounded_cost / links_cost:.2f}x in the rule process")  # fmt: skip


if __name__ == "__main__":
    main()
