"""What the doors read of crawls: which a user may see, their live counters (from Redis while
they can change, with Redis away said rather than crashing), progress, Redis' memory, and
their credentials as they may be shown."""

from __future__ import annotations

from crawlhub.http import chromium
from crawlhub.redis.connections import REDIS_ERRORS, RedisMemory, redis_memory
from crawls.engine import control, credentials
from crawls.engine.control import CrawlControl
from crawls.engine.crawl_settings import credentials_of
from crawls.models import Crawl


def rendering_problem() -> str:
    """Why crawls cannot render JavaScript on this installation (with the command that fixes
    it), or "" when they can."""
    return chromium.locate().problem


def credentials_shown(crawl: Crawl) -> dict:
    """The crawl's credentials as the doors may show them: names, never secret values."""
    return credentials.masked(credentials_of(crawl))


def credentials_left_out(crawl: Crawl) -> list[str]:
    """The origins of the crawl's seeds its saved credentials are not sent to (they stay bound
    to the origins they were entered for); [] without credentials. What the add-seeds doors
    say after adding seeds."""
    found = credentials_of(crawl)
    return credentials.origins_left_out(found, crawl.seeds) if found else []


def visible_crawls(user, queryset=None):
    """The crawls this user may see and drive: their own; staff, every crawl. Anything else
    answers 404, so that a crawl's existence does not leak."""
    queryset = Crawl.objects.all() if queryset is None else queryset
    if user.is_staff:
        return queryset
    return queryset.filter(created_by=user)


def crawl_stats(crawl: Crawl) -> dict[str, int]:
    """Live counters from Redis while the crawl can change; the saved ones after it ended."""
    if crawl.is_over() and crawl.stats:
        return crawl.stats
    return CrawlControl(crawl).stats()


def crawl_stats_safe(crawl: Crawl) -> dict:
    """Counters for a page: when Redis is away, the saved ones plus the error, not a crash."""
    try:
        return crawl_stats(crawl)
    except REDIS_ERRORS as exc:
        return {**crawl.stats, "redis_error": str(exc)}


def redis_memory_safe() -> RedisMemory | None:
    """Redis' memory against crawlhub's budget; None when Redis is away."""
    try:
        return redis_memory()
    except REDIS_ERRORS:
        return None


def crawl_waiting(*, crawl: Crawl, memory: RedisMemory | None) -> dict[str, str]:
    """Why a running crawl fetches nothing right now that is not its own doing: {"reason":
    "memory", "line": ...} while it waits for Redis memory (`memory`: redis_memory_safe(),
    read once for many crawls; past crawlhub's budget, the crawls holding the most wait:
    crawls.engine.sharing); empty reason and line otherwise, or when Redis is away (None)."""
    if memory is None:
        return {"reason": "", "line": ""}
    return control.memory_status(crawl, memory)


def crawls_stats_safe(crawls: list[Crawl]) -> dict[int, dict]:
    """crawl_stats_safe for a page of crawls, in one Redis round trip."""
    live = [c.pk for c in crawls if not (c.is_over() and c.stats)]
    try:
        stats = control.stats_of(live) if live else {}
    except REDIS_ERRORS as exc:
        stats = {pk: {"redis_error": str(exc)} for pk in live}
    return {c.pk: {**c.stats, **stats[c.pk]} if c.pk in stats else c.stats for c in crawls}


def crawl_progress(crawl: Crawl, stats: dict) -> dict:
    """Done against known work, as the crawl's page shows it (live.progress)."""
    return control.progress(crawl, stats)
