"""The yardstick crawler of bench/speed_guard.py: plain `requests`, N threads, nothing else.

    .venv/bin/python bench/bare_crawler.py http://127.0.0.1:PORT/ --threads 32

What a few dozen lines of Python crawl a site with: one `requests.Session` per thread (keep-alive),
a shared queue and seen set under one lock, links found by a regular expression over the body,
made absolute with `urljoin` and deduplicated by w3lib's `canonicalize_url` (the form crawlhub's
frontier dedups by, so both fetch the same URLs), redirects not followed but queued as links (each
URL fetched once, as crawlhub does), no retries, no robots.txt, no storage. Only URLs of the
seed's origin are followed.

Prints one JSON object: the URLs fetched (as sent), the seconds from the first request sent
to the last response read, and the CPU seconds the crawl took.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
from urllib.parse import urldefrag, urljoin, urlsplit

import requests
from w3lib.url import canonicalize_url

HREF = re.compile(rb'href="([^"]*)"')


def crawl(seed: str, *, threads: int, timeout: float = 30.0) -> dict:
    origin = urlsplit(seed)[:2]
    first = canonicalize_url(seed)
    lock = threading.Condition()
    todo, seen, fetched = [first], {first}, []
    busy = [0]  # threads fetching now: the crawl ends when none is and todo is empty
    started: list[float] = []

    def links(base: str, body: bytes) -> list[str]:
        found = []
        for raw in HREF.findall(body):
            href = raw.decode("utf-8", "replace").replace("&amp;", "&")
            url = urldefrag(urljoin(base, href))[0]
            parts = urlsplit(url)
            if (parts.scheme.lower(), parts.netloc.lower()) == origin:
                found.append(canonicalize_url(url))
        return found

    def work() -> None:
        session = requests.Session()
        while True:
            with lock:
                while not todo and busy[0]:
                    lock.wait()
                if not todo:
                    lock.notify_all()
                    return
                url = todo.pop()
                busy[0] += 1
                if not started:
                    started.append(time.monotonic())
            try:
                response = session.get(url, timeout=timeout, allow_redirects=False)
                found = links(url, response.content) if response.status_code == 200 else []
                if location := response.headers.get("location"):
                    found.append(canonicalize_url(urldefrag(urljoin(url, location))[0]))
            except requests.RequestException:
                found = []
            with lock:
                fetched.append(url)
                for link in found:
                    if link not in seen:
                        seen.add(link)
                        todo.append(link)
                busy[0] -= 1
                lock.notify_all()

    cpu = time.process_time()
    pool = [threading.Thread(target=work, daemon=True) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return {
        "fetched": fetched,
        "seconds": time.monotonic() - started[0],
        "cpu": time.process_time() - cpu,  # this process's CPU seconds (all threads)
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("seed")
    parser.add_argument("--threads", type=int, default=32)
    args = parser.parse_args()
    print(json.dumps(crawl(args.seed, threads=args.threads)))


if __name__ == "__main__":
    main()
