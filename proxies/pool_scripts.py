"""The pool's Lua scripts, registered once per Redis client, and the selection rule they
take from the settings: the machinery under proxies/pool.py, which owns every proxy key."""

from __future__ import annotations

from pathlib import Path

import redis
from django.conf import settings

from crawlhub.redis.connections import get_redis

_LUA_DIR = Path(__file__).resolve().parent / "lua"
_SCRIPTS = ("acquire", "release", "keep", "fail", "remove", "record_check", "reap", "drain")


def _lua_sources() -> dict[str, str]:
    lib = (_LUA_DIR / "_lib.lua").read_text()
    return {name: lib + "\n" + (_LUA_DIR / f"{name}.lua").read_text() for name in _SCRIPTS}


_SOURCES = _lua_sources()
# The scripts, registered on the process's client; a new client (reset_pools after a fork,
# another REDIS_URL) registers them again.
_registered: tuple[redis.Redis | None, dict[str, redis.commands.core.Script]] = (None, {})


def client() -> redis.Redis:
    """The process's client (get_redis keeps one per URL)."""
    return get_redis()


def script(name: str) -> redis.commands.core.Script:
    global _registered
    current = get_redis()
    owner, scripts = _registered
    if owner is not current:
        owner, scripts = _registered = (current, {})
    found = scripts.get(name)
    if found is None:
        found = scripts[name] = current.register_script(_SOURCES[name])
    return found


def selection_settings() -> tuple:
    """min_score, max_age_ms, max_latency_ms, channel size, as the settings say now."""
    return (
        float(settings.PROXY_MIN_SCORE),
        int(settings.PROXY_MAX_AGE * 1000),
        int(settings.PROXY_MAX_LATENCY_MS),
        int(settings.PROXY_CHANNEL_SIZE),
    )


def rule() -> list:
    """The selection rule as the scripts take it: min_score max_age_ms max_latency need scan."""
    min_score, max_age_ms, max_latency, need = selection_settings()
    return [min_score, max_age_ms, max_latency, need, max(need * 20, 1000)]
