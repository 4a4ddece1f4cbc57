"""The two ways crawlhub writes a moment.

For people, every page shows `2026-11-23 19:12:11` in the browser's time zone with the zone on
hover: the server writes a <time datetime="..."> (crawlhub/templatetags/dates.py) that
static/js/dates.js rewrites. For programs, exports, the API, webhooks and the CLI write
`machine()`: ISO 8601 in UTC with its offset and microseconds, always the same length
(`2026-11-23T19:12:11.123456+00:00`), which sorts as text and which every ISO 8601 reader takes.
"""

from __future__ import annotations

from datetime import UTC, datetime


def machine(value: datetime | None) -> str | None:
    """`value` as ISO 8601 in UTC with the offset and microseconds; None stays None."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="microseconds")
