"""What a process of crawlhub imports as it starts: every worker, cron, web server and management
command sets Django up, and the suite starts hundreds of them. Modules that cost most of a
second and serve one path are imported on that path (or by the worker before it forks its
jobs), not by all."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import django_rq
import pytest
from django.db import connection

from crawlhub.processes.rqworker import Worker

ROOT = Path(__file__).resolve().parents[2]

# Each took 0.3-0.7 s of CPU to import, in every process: daphne's server with twisted (for
# the daphne app, which only replaces `runserver`), extruct (structured data: the crawl path),
# soupsieve (a render's wait-for selector checked), psycopg (PostgreSQL's COPY).
HEAVY = ("daphne.server", "twisted.internet", "extruct", "soupsieve", "psycopg")
SET_UP = (
    "import django, sys; django.setup(); import crawls.engine.slices, crawls.pages;"
    "print(' '.join(name for name in {heavy!r} if name in sys.modules))"
)


def test_a_process_that_sets_django_up_imports_none_of_the_heavy_modules(tmp_path):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "crawlhub.settings"}
    env["CRAWLHUB_DATA_DIR"] = str(tmp_path)
    heavy = HEAVY if connection.vendor == "sqlite" else tuple(set(HEAVY) - {"psycopg"})
    done = subprocess.run(
        [sys.executable, "-c", SET_UP.format(heavy=heavy)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []


def test_runserver_is_still_daphne_s(tmp_path):
    env = {**os.environ, "CRAWLHUB_DATA_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "manage.py", "runserver", "--help"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "--noasgi" in done.stdout  # daphne's option: its runserver serves websockets too


def loaded(name: str) -> bool:
    """A job: whether the work horse running it has `name` imported."""
    return name in sys.modules


@pytest.mark.django_db
def test_a_worker_imports_what_settings_preload_before_it_forks_its_jobs(settings):
    sys.modules.pop("colorsys", None)
    settings.WORKER_PRELOAD = ["colorsys"]
    queue = django_rq.get_queue("default")
    job = queue.enqueue(loaded, "colorsys")
    Worker([queue], connection=queue.connection, name="preloading-1").work(burst=True)
    job.refresh()
    assert job.is_finished, job.get_status()
    assert job.return_value() is True
    assert "colorsys" in sys.modules
