"""The one way the Proxies pages show when something happened: an age ("5 min ago"), with the
exact time in UTC one hover away. static/js/proxies.js writes live ages the same way."""

from __future__ import annotations

from datetime import UTC, datetime

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

register = template.Library()


def age(seconds: float) -> str:
    """ "12 s ago", "5 min ago", "3 h ago", "2 d ago": the words of proxies.js's age()."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{round(seconds)} s ago"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min ago"
    if seconds < 48 * 3600:
        return f"{round(seconds / 3600)} h ago"
    return f"{round(seconds / 86400)} d ago"


@register.filter
def when(value: datetime | None, never: str = "never") -> SafeString | str:
    """A <time> with the age of `value` and its exact UTC time as its title; `never` for None."""
    if value is None:
        return never
    exact = value.astimezone(UTC)
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        exact.isoformat(timespec="seconds"), exact.strftime("%Y-%m-%d %H:%M:%S UTC"),
        age((timezone.now() - value).total_seconds()),
    )  # fmt: skip
