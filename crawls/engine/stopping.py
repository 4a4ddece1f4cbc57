"""How a slice stops, and waits: the flag that stops it (SIGTERM, the crawl leaving 'running',
its budget or turn), the report it ends with, and the wait for a Redis that went away (a slice
keeps its pages and waits, rather than failing them)."""

from __future__ import annotations

import logging
import signal
import threading
import time
from dataclasses import dataclass, field

import redis

from crawlhub.redis.connections import REDIS_ERRORS

log = logging.getLogger(__name__)

# How long a slice waits for a Redis that went away before it gives up (the worker waits as long:
# crawlhub/processes/rqworker.py).
REDIS_RETRY_SECONDS = 300.0


@dataclass
class SliceReport:
    pages: int = 0
    reason: str = ""
    seconds: float = 0.0
    handed_back: int = 0
    extra: dict = field(default_factory=dict)


class StopFlag:
    """Set by SIGTERM (the worker is shutting down) or by the crawl leaving 'running'.

    SIGTERM also sets `shutdown`, whatever stopped the slice first: the pages being rendered
    are given up and go back to the queue (a page may take the crawl's timeout in a browser;
    the worker has seconds), those being fetched finish."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.shutdown = threading.Event()
        self.reason = ""

    def set(self, reason: str) -> None:
        if reason == "sigterm":
            self.shutdown.set()
        if not self.event.is_set():
            self.reason = reason
            self.event.set()

    def __bool__(self) -> bool:
        return self.event.is_set()


def with_redis_retry(fn, *, stop_after: float = REDIS_RETRY_SECONDS):
    """Call fn, waiting out a Redis that went away (backoff up to 5 s, for stop_after s)."""
    deadline = time.monotonic() + stop_after
    delay = 0.2
    while True:
        try:
            return fn()
        except REDIS_ERRORS as exc:
            if time.monotonic() > deadline:
                raise
            why = "full" if isinstance(exc, redis.exceptions.OutOfMemoryError) else "unavailable"
            log.warning("Redis %s (%s); retrying in %.1f s", why, exc, delay)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


def stop_on_sigterm(flag: StopFlag) -> None:
    """In the worker's job process: SIGTERM finishes the current pages, hands the rest back."""
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGTERM, lambda signum, frame: flag.set("sigterm"))
