"""The status and depth indexes of pages cover the numeric sorts (crawls.models._covering): a
filter on status or depth whose matches sit far along the sort's order (error pages are small)
is then sorted on the index alone, without reading the table (crawls/pages.py).

On PostgreSQL the indexes are built with CREATE INDEX CONCURRENTLY (and the old ones dropped
likewise): a crawl of millions of pages keeps writing while they build. Elsewhere (SQLite) a
plain CREATE INDEX. Neither remakes crawls_page, so the text index's triggers
(0014_page_text_search) stay.
"""

from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models
from django.db.migrations import AddIndex, RemoveIndex


class AddIndexWithoutLock(AddIndexConcurrently):
    """CREATE INDEX CONCURRENTLY on PostgreSQL; a plain CREATE INDEX on other databases."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        return AddIndex.database_forwards(self, app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            return super().database_backwards(app_label, schema_editor, from_state, to_state)
        return AddIndex.database_backwards(self, app_label, schema_editor, from_state, to_state)


class RemoveIndexWithoutLock(RemoveIndexConcurrently):
    """DROP INDEX CONCURRENTLY on PostgreSQL; a plain DROP INDEX on other databases."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        return RemoveIndex.database_forwards(self, app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            return super().database_backwards(app_label, schema_editor, from_state, to_state)
        return RemoveIndex.database_backwards(self, app_label, schema_editor, from_state, to_state)


COVERED = ["bytes", "elapsed_ms", "fetched_at"]


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [
        ("crawls", "0014_page_text_search"),
    ]

    operations = [
        AddIndexWithoutLock(
            model_name="page",
            index=models.Index(
                fields=["crawl", "status", "id", "depth", *COVERED], name="page_status_cover"
            ),
        ),
        AddIndexWithoutLock(
            model_name="page",
            index=models.Index(
                fields=["crawl", "depth", "id", "status", *COVERED], name="page_depth_cover"
            ),
        ),
        RemoveIndexWithoutLock(model_name="page", name="page_status"),
        RemoveIndexWithoutLock(model_name="page", name="page_depth"),
    ]
