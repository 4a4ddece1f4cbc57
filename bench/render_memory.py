"""What a worker's process tree holds at its highest while a rendered page's script asks for a
huge answer, or builds a huge DOM, with a crawl's max_bytes of 1 MB.

    .venv/bin/python bench/render_memory.py                  # a 256 MB answer, a 200 MB DOM
    .venv/bin/python bench/render_memory.py --answer-mb 64 --dom-mb 50

One BrowserPool in this process (as in a worker's job process: Playwright's driver and Chromium
below it) renders a page handed to it, as a crawl hands the page it fetched: first a page whose
script fetches an answer of --answer-mb from a local server that makes it while sending it
(same origin), then a page whose script builds a text of --dom-mb characters into its DOM
(hidden: no layout). A thread samples every process of the tree every 50 ms; the figures are
the highest sum of their PSS seen (shared pages split among the processes mapping them), and
the highest RSS each kind of process reached. The tests that
hold the limits: tests/engine/test_rendering_containment.py.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MB = 1024 * 1024
ASKS_FOR_BIG = """<!doctype html><html><head><title>-</title></head><body><script>
fetch('/big').then(answer => answer.text()).then(
  text => { document.title = 'got ' + text.length; },
  error => { document.title = 'refused: ' + error.name; },
).finally(() => document.body.setAttribute('data-done', 'yes'));
</script></body></html>"""
BIG_DOM = """<!doctype html><html><head><title>big</title></head><body><script>
const p = document.createElement('p');
p.hidden = true;
p.textContent = 'x'.repeat(SIZE);
document.body.appendChild(p);
document.body.setAttribute('data-done', 'yes');
</script></body></html>"""


class TreeRss:
    """The memory of this process and all below it, sampled by a thread: the highest sum of
    their PSS, and the highest RSS of each kind (python, node: Playwright's driver, chromium)."""

    def __init__(self) -> None:
        self.peak_sum = 0
        self.peak_by_kind: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> TreeRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        from crawlhub.processes.process_group import descendants

        me = os.getpid()
        while not self._stop.is_set():
            total = 0
            for pid in [me, *descendants(me)]:
                pss, rss, kind = _memory(pid)
                total += pss
                self.peak_by_kind[kind] = max(self.peak_by_kind.get(kind, 0), rss)
            self.peak_sum = max(self.peak_sum, total)
            time.sleep(0.05)


def _memory(pid: int) -> tuple[int, int, str]:
    """(PSS, RSS, kind) of a process: PSS shares each page among the processes mapping it, so
    the tree's sum counts Chromium's shared memory once (its RSS sum would count it in each)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0, 0, "gone"
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    name = fields.get("Name", "").strip()
    kind = "chromium" if "chrom" in name or "headless" in name else name
    pss = next((line.split()[1] for line in rollup.splitlines() if line.startswith("Pss:")), "0")
    return int(pss) * 1024, int(fields.get("VmRSS", "0 kB").split()[0]) * 1024, kind


def serve(size: int):
    """A RawServer sending `size` bytes of text to whoever asks, made as they go; and how much
    it got out before the client hung up."""
    from tests.support.sites import RawServer, raw_head

    sent = [0]
    block = b"a" * 65536

    def play(conn: socket.socket, server: RawServer) -> None:
        conn.sendall(raw_head(Content_Type="text/plain", Connection="close"))
        while sent[0] < size and server.alive():
            conn.sendall(block)
            sent[0] += len(block)

    return RawServer(play, lifetime=300), sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--answer-mb", type=int, default=256)
    parser.add_argument("--dom-mb", type=int, default=200)
    parser.add_argument("--max-bytes", type=int, default=1 * MB)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crawlhub.settings")
    os.environ.setdefault("CRAWLHUB_DATA_DIR", "/tmp/render-memory")
    import django

    django.setup()
    from crawlhub.http import FetchResult, chromium, rendering

    def handed(url: str, html: str) -> FetchResult:
        body = html.encode()
        return FetchResult(
            url=url,
            final_url=url,
            status=200,
            content_type="text/html",
            body=body,
            nbytes=len(body),
            truncated=False,
            elapsed_ms=0,
            redirects=[],
            error="",
            error_kind="",
            headers={"content-type": "text/html"},
        )

    options = rendering.RenderOptions(
        timeout=120, max_bytes=args.max_bytes, wait_selector="body[data-done]"
    )
    pool = rendering.BrowserPool(chromium.locate().path, pages=1, recycle_after=100)
    try:
        pool.render(handed("http://127.0.0.1:9/", "<p>warm</p>"), proxy=None, options=options)
        with TreeRss() as idle:
            time.sleep(1)
        print(
            f"max_bytes {args.max_bytes / MB:g} MB; the tree with a browser, idle: "
            f"{idle.peak_sum / MB:.0f} MB PSS"
        )
        server, sent = serve(args.answer_mb * MB)
        with server, TreeRss() as tree:
            started = time.monotonic()
            page = pool.render(handed(server.url + "/", ASKS_FOR_BIG), proxy=None, options=options)
            took = time.monotonic() - started
        report(f"a {args.answer_mb} MB answer", tree, took, page.title or page.error)
        print(f"  the server got {sent[0] / MB:.1f} MB out before the client hung up")
        html = BIG_DOM.replace("SIZE", str(args.dom_mb * 1000 * 1000))
        with TreeRss() as tree:
            started = time.monotonic()
            page = pool.render(handed("http://127.0.0.1:9/", html), proxy=None, options=options)
            took = time.monotonic() - started
        outcome = (
            page.error or f"read, {len(page.body) / MB:.1f} MB kept, truncated={page.truncated}"
        )
        report(f"a {args.dom_mb} MB DOM", tree, took, outcome)
    finally:
        pool.close()


def report(case: str, tree: TreeRss, took: float, outcome: str) -> None:
    kinds = ", ".join(
        f"{kind} {rss / MB:.0f} MB" for kind, rss in sorted(tree.peak_by_kind.items()) if rss
    )
    print(
        f"{case}: tree peak {tree.peak_sum / MB:.0f} MB PSS (RSS: {kinds}) in {took:.1f} s: "
        f"{outcome[:90]}"
    )


if __name__ == "__main__":
    main()
