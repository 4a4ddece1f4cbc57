"""Settings for property tests (hypothesis): the same examples on every run, none remembered
between runs, and a bounded number, so that each test takes about as long every time."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

# Examples in the database are rolled back after each test, not after each example: the
# function-scoped fixtures (users, the database) are shared by a test's examples on purpose.
PROPERTY = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=300,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
