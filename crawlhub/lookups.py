"""`id__in=[...]` with a number past the database's integer range matches nothing.

Django already treats an out-of-range number that way in `exact`, `gt` and the like
(django.db.models.lookups.IntegerFieldOverflow), but not in `in`, where SQLite's driver raises
OverflowError ("Python int too large to convert to SQLite INTEGER"): a 500 for `{"ids":
[1e30 written out]}` at every door that takes a list of ids, Django's ModelMultipleChoiceField
included. Registered on IntegerField, so on every integer field and primary key, when crawlhub's
app is loaded (crawlhub/apps.py). A foreign key's `__in` (RelatedIn) is not covered.
"""

from __future__ import annotations

from django.db.models import IntegerField
from django.db.models.lookups import In


@IntegerField.register_lookup
class IntegerFieldIn(In):
    def process_rhs(self, compiler, connection):
        if self.rhs_is_direct_value():
            low, high = connection.ops.integer_field_range(
                self.lhs.output_field.get_internal_type()
            )
            self.rhs = [
                value for value in self.rhs
                if not isinstance(value, int)
                or ((low is None or value >= low) and (high is None or value <= high))
            ]  # fmt: skip
        # With nothing left, In raises EmptyResultSet: the query matches no row.
        return super().process_rhs(compiler, connection)
