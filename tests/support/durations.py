"""What each test took in a whole run, for handing out the longest files first
(tests/support/parallel.py).

tests/durations.json holds the tests that took a second or more (set-up, call and tear-down
together: a module's first test carries the start of what the module shares), measured by
`./run test --store-durations` (4 workers) and kept in the repository. A test missing from it
is guessed: a quick one took a fifth of a second, a slow one ten seconds, one that asks for a
longer timeout than the suite's a quarter of it. The figures only order the files; a stale one
costs time, never a result.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

FILE = Path(__file__).resolve().parents[1] / "durations.json"
KEPT_FROM_SECONDS = 1.0
QUICK_TEST_SECONDS = 0.2
SLOW_TEST_SECONDS = 10.0
TIMEOUT_SHARE = 0.25


def load() -> dict[str, float]:
    try:
        return json.loads(FILE.read_text())
    except FileNotFoundError:
        return {}


def guess(item: pytest.Item, measured: dict[str, float]) -> float:
    """What the test is expected to take, in seconds."""
    if item.nodeid in measured:
        return measured[item.nodeid]
    seconds = SLOW_TEST_SECONDS if item.get_closest_marker("slow") else QUICK_TEST_SECONDS
    timeout = item.get_closest_marker("timeout")
    if timeout is not None and timeout.args:
        seconds = max(seconds, float(timeout.args[0]) * TIMEOUT_SHARE)
    return seconds


class Recorder:
    """In the controller: the durations of the tests the run ran, written into FILE when it
    ends. The tests that ran replace their old figures (those under a second are dropped);
    the others keep theirs."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        kept = {k: v for k, v in load().items() if k not in self.seconds}
        kept.update({k: round(v, 1) for k, v in self.seconds.items() if v >= KEPT_FROM_SECONDS})
        FILE.write_text(json.dumps(dict(sorted(kept.items())), indent=0) + "\n")
