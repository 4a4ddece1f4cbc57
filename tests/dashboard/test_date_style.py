"""The two ways a moment is written (crawlhub/dates.py, crawlhub/templatetags/dates.py): for
people a <time> that static/js/dates.js writes in the browser's zone, for programs ISO 8601 in
UTC with the offset and microseconds, whatever the server's zone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.utils import timezone as django_timezone

from crawlhub.dates import machine
from crawlhub.templatetags.dates import ago, moment
from crawlhub.web.serializers import DateTimeField

KATHMANDU = timezone(timedelta(hours=5, minutes=45))


def test_machine_writes_utc_with_the_offset_and_microseconds_always_the_same_length():
    assert (
        machine(datetime(2026, 11, 23, 19, 12, 11, tzinfo=UTC))
        == "2026-11-23T19:12:11.000000+00:00"
    )
    local = datetime(2026, 11, 24, 0, 57, 11, 123456, tzinfo=KATHMANDU)
    assert machine(local) == "2026-11-23T19:12:11.123456+00:00"
    assert machine(None) is None


@pytest.mark.parametrize("zone", ["UTC", "America/New_York", "Asia/Kathmandu"])
def test_the_api_writes_the_same_whatever_the_server_zone(settings, zone):
    settings.TIME_ZONE = zone
    value = datetime(2026, 11, 23, 19, 12, 11, 5, tzinfo=UTC)
    assert DateTimeField().to_representation(value) == "2026-11-23T19:12:11.000005+00:00"
    assert DateTimeField().to_representation("2026-11-24T00:57:11.000005+05:45") == (
        "2026-11-23T19:12:11.000005+00:00"
    )


def test_a_moment_is_a_time_element_in_the_one_style(settings):
    settings.TIME_ZONE = "UTC"
    html = moment(datetime(2026, 11, 23, 19, 12, 11, tzinfo=UTC))
    assert html == (
        '<time datetime="2026-11-23T19:12:11.000000+00:00" title="2026-11-23 19:12:11">'
        "2026-11-23 19:12:11</time>"
    )
    # Stored as text (a webhook delivery's log), naive (taken as UTC), or missing.
    assert moment("2026-11-23T19:12:11+00:00") == html
    assert moment("2026-11-23T19:12:11") == html
    assert moment(None) == "—" and moment(None, "never") == "never"
    assert moment("not a date") == "—"


def test_an_age_carries_the_exact_time_for_the_hover():
    when = django_timezone.now() - timedelta(minutes=5)
    html = ago(when)
    assert html.startswith(f'<time datetime="{machine(when)}" data-age title="')
    assert html.endswith(">5 min ago</time>")
    assert ago(None) == "never" and ago(None, "") == ""
