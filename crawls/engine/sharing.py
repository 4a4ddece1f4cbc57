"""How crawls share the workers and Redis' memory, so that a big crawl does not starve a small
one on the same deployment (bench/fairness.py measures it).

Workers: RQ hands out slice jobs first come, first served, and a slice holds its worker for its
budget (CRAWLHUB_SLICE_SECONDS) before its successor goes to the back of the queue. While
another crawl's slice waits in the queue, a running slice ends after its turn
(CRAWLHUB_SLICE_TURN_SECONDS) instead: the waiting slice gets the worker within about a turn,
not a whole budget, and the crawls take turns. A slice alone, or behind its own crawl's slices
only, keeps its whole budget. A crawl whose priority is above 0 goes ahead of the others (its
slices are queued at the front) and does not give way.

Memory: once Redis holds crawlhub's budget of its maxmemory, the crawls that hold at least the
average of what the running crawls hold in it (by their counters: `footprint`) claim nothing,
and a crawl under that share goes on; past the mark halfway from the budget to maxmemory every
crawl waits. So the crawl filling Redis waits at the budget, as a crawl alone does, and a small
crawl beside it finishes; what the small ones add is bounded by the stop mark.
"""

from __future__ import annotations

import redis
from django.conf import settings
from rq import Queue

from crawlhub.redis.connections import RedisMemory
from crawls.engine.frontier import stats_many
from crawls.models import Crawl, CrawlState

# The RQ queue the slices wait in (crawls.engine.jobs enqueues them there).
CRAWLS_QUEUE = "crawls"
# Waiting jobs looked at: another crawl's slice further back waits behind this crawl's own
# anyway, and gets its turn when they give theirs.
WAITING_LOOKED_AT = 64
# What a crawl's keys hold in Redis, about (docs/reliability.md, "A Redis that fills up"): a URL
# seen (its fingerprint), and a request queued, delayed or claimed (packed, with its entries in
# the per-host keys).
SEEN_BYTES = 10
REQUEST_BYTES = 150


def slice_turn_seconds(budget: float) -> float:
    """How long a slice runs before it gives its worker to another crawl's waiting slice: the
    turn, within the slice's budget."""
    return min(budget, float(settings.CRAWLHUB_SLICE_TURN_SECONDS))


def gives_way(crawl: Crawl) -> bool:
    """Whether the crawl's slices end their turn for other crawls' (not above priority 0)."""
    return crawl.priority <= 0


def others_waiting(client: redis.Redis, crawl_id: int) -> bool:
    """True when a job other than this crawl's own slices waits in the crawls queue (one
    LRANGE)."""
    key = Queue.redis_queue_namespace_prefix + CRAWLS_QUEUE
    own = f"slice-{crawl_id}-".encode()
    return any(
        not job_id.startswith(own) for job_id in client.lrange(key, 0, WAITING_LOOKED_AT - 1)
    )


def footprint(stats: dict) -> int:
    """About how many bytes the crawl's keys hold in Redis, from its counters (Frontier.stats):
    every URL it scheduled is seen, and its requests not done yet are queued, delayed or
    claimed."""
    waiting = sum(int(stats.get(name, 0)) for name in ("queued", "delayed", "in_flight"))
    return int(stats.get("requests", 0)) * SEEN_BYTES + waiting * REQUEST_BYTES


def running_footprints(client: redis.Redis | None = None) -> dict[int, int]:
    """footprint() of every running crawl (a query, and one Redis round trip)."""
    ids = list(Crawl.objects.filter(state=CrawlState.RUNNING).values_list("pk", flat=True))
    return {pk: footprint(stats) for pk, stats in stats_many(ids, client=client).items()}


def fair_share(footprints: dict[int, int]) -> int:
    """What the running crawls hold in Redis on average: past the budget, a crawl holding at
    least this much waits."""
    return sum(footprints.values()) // max(1, len(footprints))


def waits_for_memory(memory: RedisMemory, *, crawl_id: int, footprints: dict[int, int]) -> bool:
    """Whether a running crawl claims nothing for Redis' memory: Redis holds its budget and the
    crawl at least the average of the running crawls (`footprints`, running_footprints(); a
    crawl running alone waits), or Redis is past the stop mark (every crawl waits). The
    estimates of what a crawl holds may be off, alike for every crawl: they only rank them."""
    if not memory.full:
        return False
    if memory.stopped:
        return True
    footprints = footprints if crawl_id in footprints else {**footprints, crawl_id: 0}
    return footprints[crawl_id] >= fair_share(footprints)
