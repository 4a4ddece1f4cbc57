"""Settings read from the environment: each reader returns the value, or stops start-up with
ImproperlyConfigured naming the variable and what was expected (crawlhub/settings.py)."""

from __future__ import annotations

import logging
import os
import re
import zoneinfo

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(
        f"{name} must be a boolean (1/0, true/false, yes/no, on/off), got {raw!r}"
    )


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


# What Django accepts as a host (django.http.request.host_validation_re), without a port, plus
# the "*" and ".example.com" forms ALLOWED_HOSTS allows.
_HOST_PATTERN = re.compile(r"\*|\.?[a-z0-9.-]+|\[[a-f0-9]*:[a-f0-9.:]+\]")


def env_hosts(name: str, default: list[str]) -> list[str]:
    """A non-empty comma-separated list of host names: an empty one would answer every
    request with 400 Bad Request."""
    hosts = env_list(name, default)
    if not hosts:
        raise ImproperlyConfigured(
            f"{name} must name at least one host, e.g. crawl.example.com,localhost (or * for any)"
        )
    for host in hosts:
        if not _HOST_PATTERN.fullmatch(host.lower()):
            raise ImproperlyConfigured(
                f"{name} must be host names separated by commas, without scheme, port or path "
                f"(e.g. crawl.example.com,.example.org,[::1]), got {host!r}"
            )
    return hosts


def env_log_level(name: str, default: str) -> str:
    value = env_str(name, default).strip().upper() or default
    if value not in logging.getLevelNamesMapping() or value == "NOTSET":
        raise ImproperlyConfigured(
            f"{name} must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL, got {value!r}"
        )
    return value


def env_time_zone(name: str, default: str) -> str:
    value = env_str(name, default).strip() or default
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ImproperlyConfigured(
            f"{name} must be an IANA time zone name such as UTC or Europe/Paris, got {value!r}"
        ) from None
    return value
