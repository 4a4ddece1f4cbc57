"""How long something took, in the two largest units that matter: "45 s", "3 min 20 s",
"2 h 5 min", "3 d 4 h" (the crawl list's Duration; static/js/crawl_list.js says it alike)."""

from __future__ import annotations

from datetime import timedelta

from django import template

register = template.Library()

UNITS = (("d", 86400), ("h", 3600), ("min", 60), ("s", 1))


@register.filter
def duration(value: timedelta | None) -> str:
    if value is None:
        return "—"
    seconds = max(0, int(value.total_seconds()))
    parts = []
    for unit, size in UNITS:
        if seconds >= size or (unit == "s" and not parts):
            parts.append(f"{seconds // size} {unit}")
            seconds %= size
        elif parts:
            break
        if len(parts) == 2:
            break
    return " ".join(parts)
