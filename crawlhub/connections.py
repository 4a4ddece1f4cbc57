"""The one Redis connection pool per process, for crawlhub's own keys."""

import redis
from django.conf import settings

# Redis is away: refused, dropped, timed out (BusyLoadingError, a restarting Redis, is a
# ConnectionError too). Callers that can wait or report it catch these.
REDIS_ERRORS = (redis.ConnectionError, redis.TimeoutError)

_pools: dict[str, redis.ConnectionPool] = {}


def get_redis() -> redis.Redis:
    """A client on settings.REDIS_URL; the pool is shared across threads of one process."""
    url = settings.REDIS_URL
    pool = _pools.get(url)
    if pool is None:
        pool = _pools[url] = redis.ConnectionPool.from_url(
            url, socket_timeout=10, socket_connect_timeout=5, health_check_interval=30
        )
    return redis.Redis(connection_pool=pool)


def reset_pools() -> None:
    """Forget pools, e.g. after a fork or when REDIS_URL changes."""
    for pool in _pools.values():
        pool.disconnect()
    _pools.clear()
