"""The one date style of every page: `{{ value|moment }}` is a <time> holding
`2026-11-23 19:12:11` (the server's zone until static/js/dates.js, loaded by base.html, writes
it in the browser's zone with the zone on hover); `{{ value|ago }}` is an age ("5 min ago")
whose hover shows that same exact time. Both print `never` (or the word given) for None."""

from __future__ import annotations

from datetime import UTC, datetime

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from crawlhub.dates import machine

register = template.Library()
SHOWN = "%Y-%m-%d %H:%M:%S"


def _moment(value: datetime | str | None) -> datetime | None:
    """A datetime, or one stored as ISO 8601 text (a webhook delivery's log); None for
    None, "" or text that is not a moment."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    if value is not None and timezone.is_naive(value):
        value = value.replace(tzinfo=UTC)
    return value


def age(seconds: float) -> str:
    """ "12 s ago", "5 min ago", "3 h ago", "2 d ago": the words of dates.js's age()."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{round(seconds)} s ago"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min ago"
    if seconds < 48 * 3600:
        return f"{round(seconds / 3600)} h ago"
    return f"{round(seconds / 86400)} d ago"


def _time(value: datetime, text: str, extra: str = "") -> SafeString:
    """A <time> of `value` (machine form), its exact time in the one style on hover."""
    shown = timezone.localtime(value).strftime(SHOWN)
    return format_html(
        '<time datetime="{}"{} title="{}">{}</time>', machine(value), extra, shown, text or shown
    )


@register.filter
def moment(value: datetime | str | None, never: str = "—") -> SafeString | str:
    """A <time> showing `value` in the one style; `never` for None."""
    value = _moment(value)
    return never if value is None else _time(value, "")


@register.filter
def ago(value: datetime | str | None, never: str = "never") -> SafeString | str:
    """A <time> showing how long ago `value` was, the exact time in the one style on hover."""
    value = _moment(value)
    if value is None:
        return never
    return _time(value, age((timezone.now() - value).total_seconds()), " data-age")
