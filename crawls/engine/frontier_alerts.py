"""What the alert checks (crawls/alert_checks.py) read and keep of each crawl in Redis: the
alert series, the hosts parked, one pass at a time.
"""

from __future__ import annotations

import time

import redis

from crawlhub.redis.connections import get_redis
from crawls.engine.frontier import STARTED_SLICE_WINDOW_MS, Frontier, _stats_from
from crawls.engine.frontier_scripts import _ms
from crawls.engine.keys import ALERTS_LOCK_KEY

# The alert series: at most this many samples, kept this long after the last pass.
ALERT_SAMPLES_KEPT = 20_000
ALERT_SERIES_TTL = 2 * 24 * 3600


def alert_views(crawl_ids: list[int], client: redis.Redis | None = None) -> dict[int, dict]:
    """What the alert checks read of each crawl, in one MULTI, once a pass (never per page):
    "stats" (stats()), "samples" (the alert series: (unix_s, responses, errors), oldest
    first), "parked" (host -> why, of the hosts parked and still held), "slices_running"."""
    client = client or get_redis()
    frontiers = [Frontier(crawl_id, client) for crawl_id in crawl_ids]
    here_ms = _ms(time.time())
    with client.pipeline(transaction=True) as pipe:
        pipe.time()
        for frontier in frontiers:
            frontier._queue_stats(pipe)
            pipe.lrange(frontier.key("alertseries"), 0, -1)
            pipe.hgetall(frontier.key("hostparked"))
            pipe.hgetall(frontier.key("hostheld"))
            # Started slices, as live_views counts them.
            pipe.zcount(frontier.key("slices"), here_ms, here_ms + STARTED_SLICE_WINDOW_MS)
        replies = iter(pipe.execute())
    seconds, micros = next(replies)
    now_ms = seconds * 1000 + micros // 1000
    views = {}
    for frontier in frontiers:
        stats = _stats_from(next(replies), next(replies), next(replies), next(replies))
        samples = [tuple(int(x) for x in point.split(b":")) for point in next(replies)]
        parked, held = next(replies), next(replies)
        # A parking ends when its hold does (or an operator's word replaces it).
        views[frontier.crawl_id] = {
            "stats": stats,
            "samples": samples,
            "parked": {
                host.decode(): why.decode()
                for host, why in parked.items()
                if int(held.get(host, 0)) > now_ms
            },
            "slices_running": int(next(replies)),
        }
    return views


def record_alert_samples(
    samples: dict[int, tuple[int, int, int]], *, keep_from: int, client: redis.Redis | None = None
) -> None:
    """Append each crawl's (unix_s, responses, errors) to its alert series, and drop those
    older than keep_from (unix s) but the newest of them: the start of the longest window."""
    client = client or get_redis()
    with client.pipeline(transaction=False) as pipe:
        for crawl_id, (at, responses, errors) in samples.items():
            key = Frontier(crawl_id, client).key("alertseries")
            pipe.rpush(key, f"{at}:{responses}:{errors}")
            pipe.lrange(key, 0, -1)
        replies = pipe.execute()
    with client.pipeline(transaction=False) as pipe:
        for n, crawl_id in enumerate(samples):
            points = [int(point.split(b":")[0]) for point in replies[2 * n + 1]]
            drop = max(0, sum(1 for at in points if at <= keep_from) - 1)
            key = Frontier(crawl_id, client).key("alertseries")
            # Bounded whatever the windows: a pass every few seconds for a day at most.
            pipe.ltrim(key, max(drop, len(points) - ALERT_SAMPLES_KEPT), -1)
            pipe.expire(key, ALERT_SERIES_TTL)
        pipe.execute()


def forget_alert_samples(crawl_ids: list[int], client: redis.Redis | None = None) -> None:
    """A paused crawl makes no progress on purpose: its windows start again when it resumes."""
    if crawl_ids:
        client = client or get_redis()
        client.delete(*(Frontier(crawl_id, client).key("alertseries") for crawl_id in crawl_ids))


def alerts_lock(ttl: float, client: redis.Redis | None = None) -> bool:
    """True for the one pass of the alert checks that may go ahead; expires after ttl s."""
    client = client if client is not None else get_redis()
    return bool(client.set(ALERTS_LOCK_KEY, "1", nx=True, px=max(1, _ms(ttl))))
