"""A worker killed in the middle of a spill or a refill (crawls/engine/overflow.py), for real: a
process of its own runs the step up to a point and kills itself with SIGKILL there, its
transaction and its lock in the database still open.

    overflow_process.kill_at(crawl.pk, "spill-taken", env=...)

Points: "spill-taken" (the requests are out of the queue, no row written), "spill-written"
(rows written, not committed), "spill-committed" (committed, still in :spilling),
"refill-queued" (back in the queue, rows removed, not committed), "refill-committed"
(rows removed and committed, their fingerprints still in :unspilled).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from tests.support import processes

ROOT = Path(__file__).resolve().parents[2]
POINTS = ("spill-taken", "spill-written", "spill-committed", "refill-queued", "refill-committed")


def kill_at(crawl_id: int, point: str, *, window: int, env: dict[str, str]) -> None:
    """Run the step in a child until `point`, where it is killed; AssertionError unless it
    died of SIGKILL there."""
    assert point in POINTS, point
    result = processes.run(
        [sys.executable, "-m", "tests.support.overflow_process", str(crawl_id), point, str(window)],
        cwd=ROOT,
        env=env,
        timeout=120,
        capture_output=True,
        text=True,
    )
    assert result.returncode == -signal.SIGKILL, (
        f"the step exited {result.returncode} before {point}:\n{result.stderr}"
    )


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main(crawl_id: int, point: str, window: int) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crawlhub.settings")
    import django

    django.setup()  # then what needs Django's settings
    from crawls.engine.frontier import Frontier
    from crawls.engine.overflow import Overflow

    frontier = Frontier(crawl_id)
    overflow = Overflow(frontier, window=window)
    queued, _ = frontier.overflow_sizes()
    if point.startswith("spill"):
        with overflow._turn() as token:
            taken = frontier.spill(token, queued - window * 3 // 4)
            if point == "spill-taken":
                _die()
            overflow._write(taken)
            if point == "spill-written":
                _die()
        _die()  # spill-committed
    with overflow._turn() as token:
        overflow._refill_batch(token, window // 2 - queued)
        if point == "refill-queued":
            _die()
    _die()  # refill-committed


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]))
