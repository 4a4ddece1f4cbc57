"""An RQ worker whose work horses get stuck on some pages, for tests of what stops them:

    manage.py rqworker crawls --worker-class tests.support.stuck_worker.StuckPagesWorker

In its work horses, the link extraction of a page whose URL holds "/stuck" runs a regular
expression that backtracks for as long as anyone waits (Python's re engine, which holds the GIL
throughout): what a user's pattern `(a+)+$` did to a slice before patterns ran on a linear-time
engine. The slice's other threads, its main thread included, cannot run meanwhile: no beat, no
state check, no job-timeout exception. Only its worker, another process, can end it. On a page
whose URL holds "/stuck/locked" it gets stuck in a transaction that locks the crawls' rows (and
on SQLite the whole database), as a slice stuck while it wrote would: whatever writes the crawl
meanwhile waits for it.
"""

from __future__ import annotations

import re

from django.db import transaction
from rq import Worker

from crawlhub.http import links
from crawls.models import Crawl

STUCK = "/stuck"
LOCKED = "/stuck/locked"
_BACKTRACKING = re.compile(r"(a+)+$")


def _stuck_on_some_pages(extract):
    def extract_or_get_stuck(body: bytes, base_url: str, content_type: str):  # same signature
        if LOCKED in base_url:
            with transaction.atomic():
                list(Crawl.objects.select_for_update())
                _BACKTRACKING.match("a" * 64 + "!")
        elif STUCK in base_url:
            _BACKTRACKING.match("a" * 64 + "!")
        return extract(body, base_url, content_type)

    return extract_or_get_stuck


class StuckPagesWorker(Worker):
    def main_work_horse(self, job, queue) -> None:  # a forked process of its own
        # What the HTTP kit's client calls for each page it fetches.
        links.extract_with_texts = _stuck_on_some_pages(links.extract_with_texts)
        super().main_work_horse(job, queue)
