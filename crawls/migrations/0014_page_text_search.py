"""A trigram index of pages' URLs and titles for the pages browser's text search
(crawls/page_search.py): FTS5 with the trigram tokenizer on SQLite, an external-content table
over crawls_page kept in step by triggers; pg_trgm GIN indexes on PostgreSQL (pg_trgm is a
trusted extension: the database's owner may create it).

On SQLite, a later migration that remakes crawls_page (Django does for some column changes)
drops these triggers with the old table: such a migration must make them again and rebuild
the index (INSERT INTO crawls_page_text(crawls_page_text) VALUES ('rebuild')). Since
0019_page_text_fed_in_batches there is no insert trigger: the engine feeds the index.
"""

from django.db import migrations

SQLITE_FORWARD = [
    "CREATE VIRTUAL TABLE crawls_page_text USING fts5("
    "url, title, content='crawls_page', content_rowid='id', tokenize='trigram')",
    "INSERT INTO crawls_page_text(crawls_page_text) VALUES ('rebuild')",
    "CREATE TRIGGER crawls_page_text_insert AFTER INSERT ON crawls_page BEGIN "
    "INSERT INTO crawls_page_text(rowid, url, title) VALUES (new.id, new.url, new.title); END",
    "CREATE TRIGGER crawls_page_text_delete AFTER DELETE ON crawls_page BEGIN "
    "INSERT INTO crawls_page_text(crawls_page_text, rowid, url, title) "
    "VALUES ('delete', old.id, old.url, old.title); END",
    "CREATE TRIGGER crawls_page_text_update AFTER UPDATE OF url, title ON crawls_page BEGIN "
    "INSERT INTO crawls_page_text(crawls_page_text, rowid, url, title) "
    "VALUES ('delete', old.id, old.url, old.title); "
    "INSERT INTO crawls_page_text(rowid, url, title) VALUES (new.id, new.url, new.title); END",
]
SQLITE_BACKWARD = [
    "DROP TRIGGER crawls_page_text_update",
    "DROP TRIGGER crawls_page_text_delete",
    "DROP TRIGGER crawls_page_text_insert",
    "DROP TABLE crawls_page_text",
]
POSTGRES_FORWARD = [
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    "CREATE INDEX page_url_trgm ON crawls_page USING gin (url gin_trgm_ops)",
    "CREATE INDEX page_title_trgm ON crawls_page USING gin (title gin_trgm_ops)",
]
# The extension stays: other tables may use it, and dropping it needs its owner.
POSTGRES_BACKWARD = ["DROP INDEX page_title_trgm", "DROP INDEX page_url_trgm"]


def run(statements: dict[str, list[str]]):
    def apply(apps, schema_editor) -> None:
        for sql in statements.get(schema_editor.connection.vendor, []):
            schema_editor.execute(sql, params=None)

    return apply


class Migration(migrations.Migration):
    dependencies = [
        ("crawls", "0013_webhook_test_delivery"),
    ]

    operations = [
        migrations.RunPython(
            run({"sqlite": SQLITE_FORWARD, "postgresql": POSTGRES_FORWARD}),
            run({"sqlite": SQLITE_BACKWARD, "postgresql": POSTGRES_BACKWARD}),
        ),
    ]
