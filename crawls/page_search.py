"""Text search over pages' URLs and titles ("contains", whatever the case), on an index of
their trigrams: an FTS5 table with the trigram tokenizer on SQLite (crawls_page_text: fed a
batch at a time by the engine's page insert, crawls.engine.rows.PageInsert, and by
Page.objects.bulk_create, a page saved alone by index_saved_page, and kept in step on deletes
and updates by triggers), pg_trgm GIN indexes
on PostgreSQL (page_url_trgm, page_title_trgm). Migrations 0014_page_text_search and
0019_page_text_fed_in_batches make them.

A trigram index can only narrow searches of at least MIN_INDEXED characters; shorter ones test
each row. Either way the match itself is the same LIKE / ILIKE "contains" test, so the index
only decides which rows are looked at, never which rows match.
"""

from __future__ import annotations

from django.db import connection
from django.db.models import BooleanField, F, Func, Q
from django.db.models.expressions import RawSQL

MIN_INDEXED = 3  # a trigram index finds nothing shorter than a trigram
TEXT_TABLE = "crawls_page_text"  # SQLite's FTS5 table of (url, title), rowid = page id


def last_page_id(cur) -> int:
    """On SQLite, the highest page id now: read inside a write transaction before inserting
    pages, the ids above it after the insert are the transaction's own rows (AUTOINCREMENT ids
    only grow; ids are not consecutive: an ignored row takes one). Django opens SQLite's
    transactions IMMEDIATE (crawlhub/settings.py), so no one else inserts meanwhile; in a
    deferred one, a writer in between would make the insert fail, never index a wrong row."""
    cur.execute("SELECT coalesce(max(id), 0) FROM crawls_page")
    return cur.fetchone()[0]


def index_pages_after(cur, after_id: int) -> None:
    """On SQLite, put the pages whose id is above after_id into the text index (one statement:
    a trigger per row cost as much as the rest of the row's insert). Every page must be indexed
    exactly once: the delete and update triggers take its old text out of the index, and
    taking out text that is not there breaks an external-content FTS5 table."""
    cur.execute(
        f"INSERT INTO {TEXT_TABLE}(rowid, url, title) "
        "SELECT id, url, title FROM crawls_page WHERE id > %s",
        [after_id],
    )


def index_saved_page(sender, instance, created: bool, **kwargs) -> None:
    """post_save of a Page (connected in apps.py): on SQLite, a page saved alone (the admin,
    Page.objects.create, a fixture) goes into the text index, which has no insert trigger."""
    if created and connection.vendor == "sqlite":
        with connection.cursor() as cur:
            cur.execute(
                f"INSERT INTO {TEXT_TABLE}(rowid, url, title) VALUES (%s, %s, %s)",
                [instance.pk, instance.url, instance.title],
            )


def indexed(q: str) -> bool:
    """Can the trigram index narrow a search for q?"""
    return len(q) >= MIN_INDEXED


def contains(q: str, *, use_index: bool) -> Q:
    """Pages whose URL or title contains q, whatever the case. use_index: through the trigram
    index (for searches that match few pages); otherwise written so that no index is used, for
    a walk along a sort's index that tests each row."""
    if connection.vendor == "postgresql":
        return Q(ILike(_column("url", use_index), q)) | Q(ILike(_column("title", use_index), q))
    like = Q(url__icontains=q) | Q(title__icontains=q)
    if not (use_index and indexed(q)):
        return like
    phrase = '"' + q.replace('"', '""') + '"'  # FTS5: the whole text, as one substring
    matching = RawSQL(f"SELECT rowid FROM {TEXT_TABLE} WHERE {TEXT_TABLE} MATCH %s", [phrase])
    return Q(id__in=matching) & like


def _column(name: str, use_index: bool):
    # text || '' is no longer the indexed column: PostgreSQL then keeps to the sort's index.
    return F(name) if use_index else Func(F(name), template="(%(expressions)s || '')")


class ILike(Func):
    """column ILIKE '%q%' (q's own % and _ taken literally): what pg_trgm's GIN index serves."""

    output_field = BooleanField()

    def __init__(self, expression, q: str) -> None:
        super().__init__(expression)
        self.q = q

    def as_sql(self, compiler, connection, **extra_context):
        sql, params = compiler.compile(self.source_expressions[0])
        pattern = "%" + connection.ops.prep_for_like_query(self.q) + "%"
        return f"({sql}::text ILIKE %s)", [*params, pattern]
