"""The live pages' publish slots as Redis gave them out, timed by Redis' own clock.

A crawl's snapshots are throttled by one key per crawl (`Frontier.publish_slot`: SET NX PX).
A test that times the snapshots it receives, or stamps them after the answer, measures the
scheduler of a busy machine as much as the throttle: a stamp taken late followed by one taken
early looks closer than the slots were. `record_slots` sends each SET of a publish key in one
MULTI with TIME instead, so every attempt is known by the time Redis decided it, and
`check_slots` holds the throttle to what it promises: a slot is taken at most once per period
across all processes, and refused only while the last one is held.

In another process: `record_slots()` at start-up, then print `json.dumps(attempts)`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable, Iterator

import redis
from redis.client import Pipeline

from crawlhub.redis.connections import get_redis
from crawls.engine.frontier import Frontier

# Redis decides a key's expiry on a millisecond clock; TIME answers in microseconds: a slot
# stamped a fraction of a millisecond late can look that much shorter or longer.
CLOCK_MS = 1.0

Attempt = tuple[float, bool]  # (Redis time in ms, the slot was taken)


def _is_publish_key(name: object) -> bool:
    text = name.decode() if isinstance(name, bytes) else str(name)
    return text.startswith("ch:{c") and text.endswith(":publish")


@contextlib.contextmanager
def record_slots() -> Iterator[list[Attempt]]:
    """Every attempt at a publish slot in this process while the block runs, in the list it
    yields (threads append to it as they go). The SET is the caller's own, unchanged; only
    TIME goes with it."""
    attempts: list[Attempt] = []
    lock = threading.Lock()
    real_set = redis.Redis.set  # BasicKeyCommands.set, which the class inherits

    def timed_set(self, name, value, *args, **kwargs):
        if isinstance(self, Pipeline) or not _is_publish_key(name):
            return real_set(self, name, value, *args, **kwargs)
        pipe = self.pipeline(transaction=True)
        real_set(pipe, name, value, *args, **kwargs)
        pipe.time()
        taken, (seconds, micros) = pipe.execute()
        with lock:
            attempts.append((seconds * 1000 + micros / 1000, bool(taken)))
        return taken

    redis.Redis.set = timed_set
    try:
        yield attempts
    finally:
        del redis.Redis.set


def check_slots(attempts: Iterable[Attempt], *, period_ms: int) -> list[float]:
    """The times the slots were taken, after asserting that the attempts (of any number of
    processes) kept to one slot per `period_ms`: two slots at least a period apart, and no
    attempt refused once the last slot's period was over."""
    ordered = sorted(attempts)
    slots = [at for at, taken in ordered if taken]
    gaps = [later - earlier for earlier, later in zip(slots, slots[1:], strict=False)]
    assert all(gap >= period_ms - CLOCK_MS for gap in gaps), (
        f"slots closer than {period_ms} ms: {gaps}"
    )
    last = None
    for at, taken in ordered:
        if taken:
            last = at
            continue
        assert last is not None, f"refused at {at:.1f} ms before any slot was taken"
        assert at - last <= period_ms + CLOCK_MS, (
            f"refused {at - last:.1f} ms after the last slot, whose period is {period_ms} ms"
        )
    return slots


def wait_until_free(crawl_id: int, *, timeout: float = 10) -> None:
    """Until nobody holds the crawl's publish slot (the last one's period is over)."""
    key, client = Frontier(crawl_id).key("publish"), get_redis()
    deadline = time.monotonic() + timeout
    while client.exists(key):
        assert time.monotonic() < deadline, f"the publish slot still held after {timeout} s"
        time.sleep(0.02)
