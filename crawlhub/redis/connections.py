"""The one Redis connection pool per process, for crawlhub's own keys."""

import logging
from dataclasses import dataclass

import redis
from django.conf import settings

from crawlhub.redis import redis_config

# Redis is away: refused, dropped, timed out (BusyLoadingError, a restarting Redis, is a
# ConnectionError too; so are a Sentinel that names no master yet, and a READONLY answer from a
# master just demoted). Callers that can wait or report it catch these. A full Redis too: with
# maxmemory and noeviction it refuses a write past its limit ("OOM command not allowed"), and a
# script refused so has written nothing (its first write is refused, or none is), so a write
# waits for memory as it waits for a Redis that went away.
REDIS_ERRORS = (redis.ConnectionError, redis.TimeoutError, redis.exceptions.OutOfMemoryError)

log = logging.getLogger(__name__)

_pools: dict[str, redis.ConnectionPool] = {}
_clients: dict[str, redis.Redis] = {}


def get_redis() -> redis.Redis:
    """The client on settings.REDIS_URL, shared across threads of one process as its pool is
    (a client holds no connection of its own; making one sets up its ~250 reply parsers)."""
    url = settings.REDIS_URL
    client = _clients.get(url)
    if client is None:
        pool = _pools.get(url)
        if pool is None:
            pool = _pools[url] = redis_config.pool(
                url, socket_timeout=10, socket_connect_timeout=5, health_check_interval=30
            )
        client = _clients[url] = redis.Redis(connection_pool=pool)
    return client


def reset_pools() -> None:
    """Forget pools and their clients, e.g. after a fork or when REDIS_URL changes."""
    for pool in _pools.values():
        pool.disconnect()
    _pools.clear()
    _clients.clear()


# Bumped right before a WAIT, so that the WAIT covers every write made before it (see below).
REPLICATION_BARRIER_KEY = "ch:replicated"
# How long an action waits for a replica to confirm it.
REPLICA_WAIT_SECONDS = 2.0


def replicated(client: redis.Redis | None = None, *, timeout: float = REPLICA_WAIT_SECONDS) -> bool:
    """Wait until a replica holds every write made so far, by any connection; True once one
    does, or at once when the Redis has no replica. False (logged) after `timeout`.

    Replication is asynchronous: a write the primary acknowledged may not be on the replica
    that Sentinel promotes when the primary dies. The crawl engine's own writes can afford that
    (a completion lost is a page fetched again: docs/reliability.md), but not an action whose
    loss no worker can redo: a crawl's seeds, a state change. Those wait here. WAIT covers the
    writes of its own connection only, so the same connection first makes one (INCR) that
    replicates after every earlier write of every connection: the replication stream is one,
    in order."""
    client = client if client is not None else get_redis()
    if not int(client.info("replication").get("connected_slaves", 0)):
        return True
    with client.pipeline(transaction=False) as pipe:
        pipe.incr(REPLICATION_BARRIER_KEY)
        pipe.execute_command("WAIT", 1, max(1, round(timeout * 1000)))
        _, acknowledged = pipe.execute()
    if int(acknowledged) >= 1:
        return True
    log.warning(
        "no Redis replica confirmed the last writes within %.1f s: a failover now could undo them",
        timeout,
    )
    return False


# Redis memory: crawls stop adding to Redis once it holds this share of its maxmemory (the
# budget, settings.CRAWLHUB_REDIS_MEMORY_BUDGET_PERCENT), well before Redis refuses writes.


@dataclass(frozen=True)
class RedisMemory:
    """What Redis holds (used_memory), its maxmemory (0: none) and crawlhub's budget of it
    (0: none, when Redis has no maxmemory)."""

    used: int
    maxmemory: int
    budget: int

    @property
    def full(self) -> bool:
        return self.budget > 0 and self.used >= self.budget

    @property
    def stop_mark(self) -> int:
        """Halfway from the budget to maxmemory: past the budget, the crawls holding the most
        wait (crawls.engine.sharing) and the others go on, up to this mark."""
        return self.budget + (self.maxmemory - self.budget) // 2

    @property
    def stopped(self) -> bool:
        """Redis holds its stop mark: every crawl waits for memory."""
        return self.budget > 0 and self.used >= self.stop_mark


def redis_memory_from(info: dict) -> RedisMemory:
    """RedisMemory from Redis' INFO memory section (as redis-py parses it)."""
    maxmemory = int(info.get("maxmemory", 0) or 0)
    budget = maxmemory * settings.CRAWLHUB_REDIS_MEMORY_BUDGET_PERCENT // 100
    return RedisMemory(used=int(info.get("used_memory", 0)), maxmemory=maxmemory, budget=budget)


def redis_memory(client: redis.Redis | None = None) -> RedisMemory:
    """Redis' memory now (one INFO call)."""
    return redis_memory_from((client or get_redis()).info("memory"))
