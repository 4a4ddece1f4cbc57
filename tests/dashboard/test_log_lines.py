"""What the server's log says of ordinary refusals: a line, not a traceback."""

import io
import logging

import pytest

pytestmark = pytest.mark.django_db


def test_a_403_a_view_raised_on_purpose_logs_a_line_not_a_traceback(user_client):
    """A user who is not staff opening the proxies page: the log had a full traceback."""
    console = logging.getLogger().handlers[0]  # settings.LOGGING's console handler
    assert console.filters, "the console handler lost its filters"
    # The console handler's own filters and format, writing where this test reads.
    out = io.StringIO()
    seen = logging.StreamHandler(out)
    seen.setFormatter(console.formatter)
    for found in console.filters:
        seen.addFilter(found)
    logger = logging.getLogger("django.request")
    logger.addHandler(seen)
    try:
        assert user_client.get("/proxies/").status_code == 403
    finally:
        logger.removeHandler(seen)
    text = out.getvalue()
    assert "WARNING django.request: Forbidden (Permission denied): /proxies/" in text
    assert "Traceback" not in text and "PermissionDenied" not in text
