"""A worker that died, or that `up` (or `worker`) killed because it did not stop in time, is
forgotten by RQ at once: /healthz and the Workers page no longer count it for the minutes its
registration would have lived (a run beside the suite saw `up`, started again after a stop
that killed a worker busy with a proxy import, report 3 workers for its 2)."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings
from rq import Worker

from crawlhub.processes.process_group import ProcessGroup
from crawlhub.processes.rqworker import forget_worker
from crawlhub.redis.connections import get_redis
from tests.support.crawling import database_url

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.django_db(transaction=True)


def registered() -> list[int]:
    return [worker.pid for worker in Worker.all(connection=get_redis())]


@pytest.mark.parametrize("end", ["died", "killed at stop"])
def test_a_worker_that_ended_without_its_goodbye_is_forgotten_at_once(end):
    env = {**os.environ, "DATABASE_URL": database_url(), "REDIS_URL": settings.REDIS_URL}
    group = ProcessGroup(env=env, forget=forget_worker)
    group.add(
        "worker-1", [sys.executable, str(ROOT / "manage.py"), "rqworker", "control"], restart=True
    )
    group.start()
    try:
        proc = group.procs["worker-1"]
        deadline = time.monotonic() + 120
        while registered() != [proc.pid]:
            assert proc.poll() is None, f"the worker exited with {proc.returncode}"
            assert time.monotonic() < deadline, registered()
            time.sleep(0.2)
        if end == "died":
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
            group.check()
        else:
            os.kill(proc.pid, signal.SIGSTOP)  # it cannot answer SIGTERM: it is killed
            group.stop(timeout=1)
        assert registered() == []
    finally:
        group.stop(timeout=10)
