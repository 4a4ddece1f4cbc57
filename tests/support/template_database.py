"""One migrated SQLite test database per run, copied by every xdist worker.

Each worker has a test database of its own (its data dir, tests/support/parallel.py). Migrating
one costs some 3.5 s of CPU, and the four workers used to do it at once on the machine's two
cores, on each worker's first database test. Instead the xdist controller starts one
`python -m tests.support.template_database` as the run begins, while the workers start and
collect: it migrates a database of its own (as pytest-django would, `migrate --run-syncdb`) and
puts it in the run's directory. A worker's first database test waits for it, copies it with
SQLite's backup API, and pytest-django runs `migrate` on the copy as on a kept database
(nothing left to apply: it only checks).

If the template cannot be made (its error is in the run's directory, `template.failed`), each
worker migrates its own database as before: a broken migration then fails the tests that need
the database, with Django's own message. The template is keyed by a hash of the migrations. On
PostgreSQL (DATABASE_URL set) each worker migrates its own database: nothing here applies.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import subprocess
import sys
import time
import traceback
from pathlib import Path

import django
from django.conf import settings
from django.core.management import call_command
from django.db import connections

from tests.support import processes

ROOT = Path(__file__).resolve().parents[2]
# Set by the xdist controller for its workers (tests/support/parallel.py): a directory shared by
# the run's workers, removed when the run ends.
RUN_DIR_VARIABLE = "CRAWLHUB_TEST_RUN_DIR"
SQLITE = "django.db.backends.sqlite3"
# How long a worker waits for the template before it migrates its own database. Migrating
# takes 5 s of CPU; at a load average of 25 that was 100 s.
TEMPLATE_TIMEOUT = 300


def _template(run_dir: Path) -> Path:
    """Where the template goes: named by a hash of every migration file's name and content."""
    digest = hashlib.sha1()
    for path in sorted(ROOT.glob("*/migrations/*.py")):
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    return run_dir / f"test-database-{digest.hexdigest()[:16]}.sqlite3"


def _failed(run_dir: Path) -> Path:
    return run_dir / "template.failed"


def start(*, run_dir: Path) -> subprocess.Popen:
    """The controller's part: start making the run's template, in the background."""
    env = {**os.environ, "CRAWLHUB_DATA_DIR": str(run_dir / "template-data")}
    env.pop("DATABASE_URL", None)
    log = open(run_dir / "template.log", "wb")  # noqa: SIM115 (the child writes it)
    with log:
        return processes.spawn(
            [sys.executable, "-m", "tests.support.template_database", str(run_dir)],
            env=env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            outlives_the_test=True,
        )


def copy_into(*, test_database: dict, run_dir: Path) -> bool:
    """A worker's part: put a copy of the run's template where `test_database` (the settings
    of the worker's database) says its test database goes. False when there is none to copy (a
    database other than SQLite, or the template could not be made): pytest-django then migrates
    the test database as usual."""
    if test_database["ENGINE"] != SQLITE:
        return False
    template, failed = _template(run_dir), _failed(run_dir)
    deadline = time.monotonic() + TEMPLATE_TIMEOUT
    while not template.exists():
        if failed.exists() or time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    target = Path(test_database["TEST"]["NAME"])
    target.unlink(missing_ok=True)
    _sqlite_copy(template, target)
    return True


def _sqlite_copy(source: Path, target: Path) -> None:
    """A consistent copy, whatever the source's write-ahead log still holds (a plain file copy
    would miss the pages not yet checkpointed into the main file)."""
    with (
        contextlib.closing(sqlite3.connect(source)) as src,
        contextlib.closing(sqlite3.connect(target)) as dst,
    ):
        src.backup(dst)


def _make(run_dir: Path) -> None:
    """Migrate the data dir's database (CRAWLHUB_DATA_DIR, set by start()) and publish it as the
    run's template: written whole under another name first, so that a worker never copies half
    of it."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crawlhub.settings")
    django.setup()
    call_command("migrate", interactive=False, verbosity=0, run_syncdb=True)
    connections.close_all()
    template = _template(run_dir)
    partial = template.with_name(template.name + ".partial")
    _sqlite_copy(Path(settings.DATABASES["default"]["NAME"]), partial)
    partial.replace(template)


if __name__ == "__main__":
    run_dir = Path(sys.argv[1])
    try:
        _make(run_dir)
    except BaseException:
        _failed(run_dir).write_text(traceback.format_exc())
        raise
