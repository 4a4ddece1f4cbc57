"""Fuzzing the JSON API from its OpenAPI schema: no operation answers a server error, ever.

Each operation gets schemathesis's cases, valid and invalid for the schema, sent to the real
WSGI app in this process (every middleware, DRF, the services, SQLite or PostgreSQL and the
session's Redis) as a staff member or a user with a real API token. Path ids point at real rows
half of the time, so the cases reach the services and not only a 404. Half of the cases get a
hostile string (HOSTILE: numbers in other scripts, NUL, a lone surrogate, 10,000 characters,
bidi marks, cursor and field-sort shapes) in one of their query parameters (any the operation
reads, given or not) or body strings. The run is the same every time (hypothesis
derandomized, no example database) and bounded: EXAMPLES cases an operation.
"""

from __future__ import annotations

import time
from urllib.parse import urlsplit, urlunsplit

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from crawlhub import tokens
from crawls import schedules, webhooks
from crawls.models import Channel, CrawlState, FailedRequest, Page
from proxies import services as proxy_services
from proxies.models import Proxy
from tests.support.crawling import make_crawl
from tests.support.sites import pages_site

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

EXAMPLES = 80
# The schema /api/schema/ serves (SpectacularAPIView builds it the same way).
SCHEMA = schemathesis.openapi.from_dict(SchemaGenerator().get_schema(request=None, public=True))
OPERATIONS = {result.ok().label: result.ok() for result in SCHEMA.get_all_operations()}
APP = get_wsgi_application()


@pytest.fixture(autouse=True)
def requests_in_the_test_transaction():
    """The WSGI app closes the database connection at the start and the end of each request
    (close_old_connections), which inside the test's transaction would end it. Django's test
    client disconnects the same two receivers for each request, for the same reason; here it
    is for the whole test, whose rows are then rolled back instead of flushed (4 times faster
    on PostgreSQL)."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def world(user, staff, make_site) -> dict:
    """Rows for the path ids to name, the two identities' tokens, and a loopback site that
    serves a proxy list (the only place an import from a URL may fetch)."""
    crawl = make_crawl(user, "fuzzed")
    done = make_crawl(user, "done")
    done.state, done.finished_at = CrawlState.FINISHED, timezone.now()
    done.save()
    now = timezone.now()
    Page.objects.create(crawl=done, url="http://127.0.0.1:9/", url_hash="a", fetched_at=now)
    FailedRequest.objects.create(
        crawl=done, url="http://127.0.0.1:9/x", url_hash="b", failed_at=now
    )
    schedule = schedules.schedule_create(user=user, template=crawl, cron="0 3 * * *")
    webhook, _ = webhooks.webhook_create(
        user=user, crawl=crawl, url="http://127.0.0.1:9/hook", events=["finished"]
    )
    proxy_services.import_proxies(text="127.0.0.1:9\n", source="fuzz", user=staff)
    spare, _ = tokens.token_create(user=user, name="spare")
    site = make_site(pages_site({"/list.txt": "127.0.0.1:8\n"}))
    return {
        "auth": {
            "staff": tokens.token_create(user=staff, name="fuzz")[1],
            "user": tokens.token_create(user=user, name="fuzz")[1],
        },
        "ids": {
            "/api/crawls/": [crawl.pk, done.pk],
            "/api/schedules/": [schedule.pk],
            "/api/webhooks/": [webhook.pk],
            "/api/proxies/": [Proxy.objects.get().pk],
            "/api/tokens/": [spare.pk],
            "/api/channels/": [Channel.default().slug],
        },
        "site": urlsplit(site.url).netloc,
    }


# Strings schemathesis seldom makes, that have been 500s somewhere: '²' passes str.isdigit()
# and fails int(), a lone surrogate cannot be written as UTF-8 (in a JSON body only: a query
# string is bytes), a field sort of no rule's name, a cursor that decodes to the wrong shape.
HOSTILE = [
    "\u00b2",
    "\u0663",
    "\U0001d7d9",
    "\x00",
    "a\x00b",
    "\u202e",
    "\ufeff",
    "\r\n",
    " ",
    "",
    "-1",
    "9" * 30,
    "1e309",
    "nan",
    "field:-1",
    "field:a__b",
    "field:\u00e9",
    "%00",
    "%",
    "\\",
    "'",
    "<script>",
    "null",
    "[]",
    "a" * 10_000,
    "eyJ4IjoxfQ",
    "WyJpZCIsZmFsc2UsbnVsbCwtMV0",
]
BODY_ONLY = ["\ud800", "x\udfffy"]
hostile = st.one_of(
    st.none(),
    st.tuples(st.integers(0, 50), st.sampled_from(HOSTILE + BODY_ONLY)),
)


def spoil(case, at: int, value: str) -> None:
    """Put `value` in one place of the case (the at-th, counting round): a query parameter the
    operation reads, given or not, or a string inside its JSON body."""
    places: list[tuple[object, object]] = []
    if value not in BODY_ONLY:
        case.query = dict(case.query or {})
        places += [(case.query, parameter.name) for parameter in case.operation.query]
    places += list(_strings(case.body))
    if places:
        container, key = places[at % len(places)]
        container[key] = value


def _strings(value):
    """(container, key) of every string in a JSON value."""
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list):
        items = list(enumerate(value))
    else:
        return
    for key, item in items:
        if isinstance(item, str):
            yield value, key
        else:
            yield from _strings(item)


def aim(case, world: dict, real: int | None) -> None:
    """When `real` is not None, point the path id and the ids and URLs in the body at real rows
    and loopback addresses, so that the case gets past the lookups into the services. Always
    point a URL to import at the loopback site: a fuzzed URL is never fetched."""
    body = case.body if isinstance(case.body, dict) else {}
    if real is not None:
        for prefix, ids in world["ids"].items():
            if case.operation.path.startswith(prefix) and case.path_parameters:
                name = next(iter(case.path_parameters))
                case.path_parameters[name] = ids[real % len(ids)]
        crawls = world["ids"]["/api/crawls/"]
        for key in ("template", "crawl"):
            if key in body:
                body[key] = crawls[real % len(crawls)]
        if "seeds" in body:
            body["seeds"] = ["http://127.0.0.1:9/"]
        if case.operation.path.startswith("/api/webhooks/") and "url" in body:
            body["url"] = "http://127.0.0.1:9/hook"
    if case.operation.path == "/api/proxies/import/" and isinstance(body.get("url"), str):
        try:
            parts = urlsplit(body["url"])
            body["url"] = urlunsplit(("http", world["site"], *parts[2:]))
        except ValueError:
            body["url"] = f"http://{world['site']}/list.txt"
        assert urlsplit(body["url"]).netloc == world["site"]


@pytest.mark.parametrize("label", OPERATIONS)
def test_no_api_operation_answers_a_server_error(label, world):
    operation = OPERATIONS[label]
    cases = st.one_of(
        operation.as_strategy(generation_mode=GenerationMode.POSITIVE),
        operation.as_strategy(generation_mode=GenerationMode.NEGATIVE),
    )
    sent = []

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(
        case=cases,
        who=st.sampled_from(["staff", "user"]),
        real=st.one_of(st.none(), st.integers(0, 1)),
        spoiled=hostile,
    )
    def send(case, who: str, real: int | None, spoiled: tuple[int, str] | None) -> None:
        if spoiled is not None:
            spoil(case, *spoiled)
        aim(case, world, real)
        headers = {"Authorization": f"Bearer {world['auth'][who]}"}
        response = case.call(app=APP, headers=headers)
        sent.append(response.status_code)
        case.validate_response(response, checks=[not_a_server_error], headers=headers)

    started = time.monotonic()
    send()
    statuses = {code: sent.count(code) for code in sorted(set(sent))}
    print(f"{label}: {len(sent)} cases in {time.monotonic() - started:.1f} s, {statuses}")
    assert len(sent) >= EXAMPLES // 2, statuses
