"""Template filters of the pages browser: extracted values by field name, lists of values,
JSON shown as text."""

from __future__ import annotations

import json

from django import template

register = template.Library()


@register.filter
def get_item(mapping: object, key: str) -> object:
    """mapping[key], or None when there is no such key (or no mapping)."""
    return mapping.get(key) if isinstance(mapping, dict) else None


@register.filter
def is_list(value: object) -> bool:
    return isinstance(value, list)


@register.filter
def as_json(value: object) -> str:
    """A JSON value as indented text (escaped by the template like any text)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


@register.filter
def thousands(value: int) -> str:
    """10000 as 10,000."""
    return f"{value:,}"
