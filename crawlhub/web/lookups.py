"""Lookups that match nothing where the database would otherwise fail, and ids read from a
query string (typed_id).

`id__in=[...]` with a number past the database's integer range matches nothing.

Django already treats an out-of-range number that way in `exact`, `gt` and the like
(django.db.models.lookups.IntegerFieldOverflow), but not in `in`, where SQLite's driver raises
OverflowError ("Python int too large to convert to SQLite INTEGER"): a 500 for `{"ids":
[1e30 written out]}` at every door that takes a list of ids, Django's ModelMultipleChoiceField
included. Registered on IntegerField, so on every integer field and primary key, when crawlhub's
app is loaded (crawlhub/apps.py). A foreign key's `__in` (RelatedIn) is not covered.

A text compared with one holding a NUL character: PostgreSQL stores no NUL and refuses one in any
text it is asked to compare ("PostgreSQL text fields cannot contain NUL (0x00) bytes"), so a
channel slug of "a\x00" sent to the API was a 500. No stored text holds a NUL, so such a lookup
matches nothing, on every database alike.
"""

from __future__ import annotations

import re

from django.core.exceptions import EmptyResultSet
from django.db.models import CharField, IntegerField, TextField, lookups
from django.db.models.lookups import In

_ASCII_DIGITS = re.compile(r"[0-9]{1,18}")


def typed_id(text: str) -> int | None:
    """A row's id as someone typed it in a query string, or None when it is not one: ASCII
    digits only, at most 18 of them (every database's integer range). str.isdigit() is True
    for '²', which int() refuses (a 500 wherever it was trusted), and int() reads '٣' as 3."""
    return int(text) if _ASCII_DIGITS.fullmatch(text) else None


@IntegerField.register_lookup
class IntegerFieldIn(In):
    def process_rhs(self, compiler, connection):
        if self.rhs_is_direct_value():
            low, high = connection.ops.integer_field_range(
                self.lhs.output_field.get_internal_type()
            )
            self.rhs = [
                value
                for value in self.rhs
                if not isinstance(value, int)
                or ((low is None or value >= low) and (high is None or value <= high))
            ]
        # With nothing left, In raises EmptyResultSet: the query matches no row.
        return super().process_rhs(compiler, connection)


def _has_nul(value) -> bool:
    return isinstance(value, str) and "\x00" in value


class _NoNul:
    """A mixin for a text lookup: a value with a NUL matches no row."""

    def process_rhs(self, compiler, connection):
        if self.rhs_is_direct_value() and _has_nul(self.rhs):
            raise EmptyResultSet
        return super().process_rhs(compiler, connection)


class NoNulIn(In):
    """`in`: the values with a NUL are left out (with none left, In matches no row)."""

    def process_rhs(self, compiler, connection):
        if self.rhs_is_direct_value():
            self.rhs = [value for value in self.rhs if not _has_nul(value)]
        return super().process_rhs(compiler, connection)


CharField.register_lookup(NoNulIn)
TextField.register_lookup(NoNulIn)
_TEXT_LOOKUPS = [
    lookups.Exact,
    lookups.IExact,
    lookups.Contains,
    lookups.IContains,
    lookups.StartsWith,
    lookups.IStartsWith,
    lookups.EndsWith,
    lookups.IEndsWith,
]
for _lookup in _TEXT_LOOKUPS:
    _no_nul = type(f"NoNul{_lookup.__name__}", (_NoNul, _lookup), {})
    CharField.register_lookup(_no_nul)
    TextField.register_lookup(_no_nul)
