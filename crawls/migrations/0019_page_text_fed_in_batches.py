"""On SQLite the text index of pages (0014_page_text_search) is fed a batch of page rows at a
time by the engine's insert (crawls.engine.rows.PageInsert), not by an insert trigger row by
row: the trigger alone cost as much as the rest of a page row's insert. Deletes and updates keep
their triggers. Backward, the insert trigger comes back (pages written meanwhile are indexed).
"""

from django.db import migrations

INSERT_TRIGGER = (
    "CREATE TRIGGER crawls_page_text_insert AFTER INSERT ON crawls_page BEGIN "
    "INSERT INTO crawls_page_text(rowid, url, title) VALUES (new.id, new.url, new.title); END"
)


def run(sql: str):
    def apply(apps, schema_editor) -> None:
        if schema_editor.connection.vendor == "sqlite":
            schema_editor.execute(sql, params=None)

    return apply


class Migration(migrations.Migration):
    dependencies = [
        ("crawls", "0018_page_heads"),
    ]

    operations = [
        migrations.RunPython(run("DROP TRIGGER crawls_page_text_insert"), run(INSERT_TRIGGER)),
    ]
