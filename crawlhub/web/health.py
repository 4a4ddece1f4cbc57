"""What /healthz and the navigation bar report: database, Redis and live workers."""

from django.db import connection
from rq import Worker

from crawlhub.redis.connections import get_redis


def _check(fn) -> dict:
    try:
        return {"ok": True, **fn()}
    except Exception as exc:  # any failure of a dependency is the answer, not a crash
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def _database() -> dict:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return {"vendor": connection.vendor}


def _redis() -> dict:
    info = get_redis().info("server")
    return {"version": info.get("redis_version")}


def _workers() -> dict:
    return {"count": Worker.count(connection=get_redis())}


def health() -> dict:
    report = {"database": _check(_database), "redis": _check(_redis)}
    # Workers are counted in Redis: when Redis is down, that is the same error.
    report["workers"] = _check(_workers) if report["redis"]["ok"] else dict(report["redis"])
    report["ok"] = report["database"]["ok"] and report["redis"]["ok"]
    return report
