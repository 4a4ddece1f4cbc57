"""Rows inserted in bulk with one prepared statement, for a slice's page rows.

`bulk_create` adapts every value of every row and builds one SQL string with a placeholder
per value, all on the thread that calls it: a quarter of a slice thread's CPU at a thousand
pages a second. Here a row is adapted where it is made (a fetch thread) by the same field
methods `bulk_create` uses, and the writing thread only runs one statement that the database
driver repeats per row. Rows that break a unique constraint are skipped, as with
`bulk_create(ignore_conflicts=True)`.
"""

from __future__ import annotations

import functools

from django.db import connections, models, transaction
from django.db.models.constants import OnConflict


class BulkInsert:
    """Insert rows of `model` (every concrete field but the auto primary key)."""

    def __init__(self, model: type[models.Model], using: str = "default") -> None:
        self.model = model
        self.using = using
        self.fields = [f for f in model._meta.concrete_fields if not f.primary_key]

    def row(self, obj: models.Model) -> tuple:
        """obj's values as the database takes them. Safe to call from any thread."""
        connection = connections[self.using]
        return tuple(
            field.get_db_prep_save(field.pre_save(obj, True), connection=connection)
            for field in self.fields
        )

    def write(self, rows: list[tuple]) -> None:
        """Insert rows in one transaction; rows that conflict are left out."""
        if not rows:
            return
        connection = connections[self.using]
        with transaction.atomic(using=self.using, savepoint=False), connection.cursor() as cur:
            cur.executemany(self._sql, rows)

    @functools.cached_property
    def _sql(self) -> str:
        """The INSERT, built once per BulkInsert (its database is fixed)."""
        ops = connections[self.using].ops
        columns = ", ".join(ops.quote_name(field.column) for field in self.fields)
        values = ", ".join(["%s"] * len(self.fields))
        return (
            f"{ops.insert_statement(on_conflict=OnConflict.IGNORE)} "
            f"{ops.quote_name(self.model._meta.db_table)} ({columns}) VALUES ({values}) "
            f"{ops.on_conflict_suffix_sql(self.fields, OnConflict.IGNORE, None, None) or ''}"
        ).rstrip()
