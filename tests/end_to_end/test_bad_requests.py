"""Requests that used to end in a 500 or a bare "Bad Request (400)": each now gets a 4xx that
says what was wrong, as JSON on the API and as a page (or a form error) elsewhere.

Bodies past the size limit, too many fields, unreadable multipart, a NUL in the address, JSON
nested past what Python reads, ids past the database's integer range, and text no database
column stores. (Bad values in fields: test_bad_input.py; crawl options, cron expressions and
proxy lists have their own files.)
"""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone

from crawlhub.models import ApiToken
from crawls.models import Channel, Crawl, CrawlState, FailedRequest, Webhook
from proxies import services as proxy_services
from proxies.models import Proxy
from tests.support.clients import bearer, post
from tests.support.crawling import make_crawl

pytestmark = pytest.mark.django_db

MB = 1024 * 1024
HUGE = 10**30  # past every database's integer range


@pytest.fixture
def lenient(client) -> Client:
    """A client that gets a 500 page instead of the view's exception, as a browser would."""
    client.raise_request_exception = False
    return client


def page_says(response, status: int, message: str) -> None:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"].startswith("text/html")
    assert message in response.content.decode()


def json_says(response, status: int, message: str) -> None:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"].startswith("application/json")
    assert message in response.json()["detail"]


# == bodies Django will not read ================================================================


def test_an_api_body_over_the_limit_is_413_with_the_limit_in_json(user, lenient):
    assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE == 8 * MB
    body = {"name": "x" * (9 * MB), "seeds": ["http://127.0.0.1:9/"]}
    response = post(lenient, "/api/crawls/", body, **bearer(user))
    json_says(response, 413, "The request is larger than 8 MB (uploaded files aside)")
    assert not Crawl.objects.exists()


def test_a_form_over_the_limit_is_a_413_page_with_the_limit(staff, lenient):
    lenient.force_login(staff)
    response = lenient.post("/proxies/import", {"text": "1.2.3.4:80\n" * (9 * MB // 11)})
    page_says(response, 413, "The request is larger than 8 MB (uploaded files aside)")
    assert "Nothing was changed" in response.content.decode()
    assert not Proxy.objects.exists()


def test_a_3_mb_list_sent_to_the_api_is_read(staff, client):
    """The old limit (Django's 2.5 MB) refused a proxy list the import allows (5 MB)."""
    text = "# a comment line, skipped by the parser\n" * 75_000  # 3 MB
    response = post(client, "/api/proxies/import/", {"text": text}, **bearer(staff))
    # Imports run as background jobs: the list was read and queued, not refused as too large.
    assert response.status_code == 202, response.content[:300]
    assert response.json()["kind"] == "import" and response.json()["source"] == "api"


def test_a_form_with_too_many_fields_is_a_400_page_saying_so(staff, lenient):
    lenient.force_login(staff)
    ids = [str(n) for n in range(settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + 1)]
    response = lenient.post("/proxies/action", {"action": "validate", "ids": ids})
    page_says(response, 400, "The form has more than 1000 fields, the most crawlhub reads.")


def test_a_multipart_body_without_a_boundary_is_a_400_page_saying_so(staff, lenient):
    lenient.force_login(staff)
    response = lenient.post("/proxies/import", b"garbage", content_type="multipart/form-data")
    page_says(response, 400, "The form&#x27;s data could not be read: Invalid boundary")


def test_json_nested_past_what_python_reads_is_a_400(user, lenient):
    for body in ("[" * 100_000 + "]" * 100_000, '{"a": ' * 100_000 + "1" + "}" * 100_000):
        response = lenient.post(
            "/api/crawls/", body, content_type="application/json", **bearer(user)
        )
        json_says(response, 400, "JSON parse error - the body is nested too deeply")


# == a NUL in the address =======================================================================


@pytest.mark.parametrize(
    "path",
    ["/api/crawls/?state=%00", "/api/proxies/?q=a%00b", "/api/channels/%00/", "/api/crawls/?%00=1"],
)
def test_a_nul_in_an_api_address_is_a_400_in_json(staff, lenient, path):
    """PostgreSQL refuses a NUL in any text it compares: ?state=%00 was a 500 there."""
    json_says(lenient.get(path, **bearer(staff)), 400, "The address has a NUL character (%00)")


@pytest.mark.parametrize("path", ["/?state=%00", "/proxies/?source=%00", "/admin/auth/user/?q=%00"])
def test_a_nul_in_a_page_address_is_a_400_page(staff, lenient, path):
    staff.is_superuser = True
    staff.save()
    lenient.force_login(staff)
    page_says(lenient.get(path), 400, "The address has a NUL character (%00); no field takes one.")


# == ids past the database's integer range ======================================================


def test_a_nul_in_a_slug_sent_to_the_api_is_a_400_naming_the_field(user, staff, lenient):
    """PostgreSQL refuses a NUL in any text it compares: `slug = 'a\\x00'` was a 500."""
    Channel.objects.create(name="Team", slug="team")
    crawl = post(
        lenient,
        "/api/crawls/",
        {"name": "x", "seeds": ["http://127.0.0.1:9/"], "channel": "team\x00"},
        **bearer(user),
    )
    assert crawl.status_code == 400, crawl.content[:300]
    assert list(crawl.json()) == ["channel"]
    assert not Crawl.objects.exists()
    hook = post(
        lenient,
        "/api/webhooks/",
        {"channel": "\x00", "url": "https://hooks.example/x"},
        **bearer(staff),
    )
    assert hook.status_code == 400 and "channel" in hook.json(), hook.content[:300]
    # The same filter without a NUL still finds the channel: the lookup is only narrowed.
    assert list(Channel.objects.filter(slug__in=["team", "t\x00"])) == [
        Channel.objects.get(slug="team")
    ]
    assert not Channel.objects.filter(slug__contains="\x00").exists()
    assert Channel.objects.exclude(slug="team\x00").filter(slug="team").exists()


def test_api_ids_past_the_integer_range_match_nothing(user, staff, lenient):
    """SQLite's driver raised OverflowError for `id IN (10**30)`: a 500 at every list of ids."""
    crawl = make_crawl(user)
    Crawl.objects.filter(pk=crawl.pk).update(state=CrawlState.FINISHED)
    FailedRequest.objects.create(
        crawl=crawl, url="http://127.0.0.1:9/x", url_hash="x", failed_at=timezone.now()
    )
    retried = post(lenient, f"/api/crawls/{crawl.pk}/retry/", {"ids": [HUGE]}, **bearer(user))
    assert (retried.status_code, retried.json()) == (200, {"retried": 0})
    assert crawl.failures.count() == 1
    proxy_services.import_proxies(text="1.2.3.4:80", source="t", user=staff)
    auth = bearer(staff)
    removed = post(lenient, "/api/proxies/remove/", {"ids": [HUGE], "why": "x"}, **auth)
    assert (removed.status_code, removed.json()) == (200, {"removed": [], "unknown": [str(HUGE)]})
    validated = post(lenient, "/api/proxies/validate/", {"ids": [HUGE]}, **auth)
    assert (validated.status_code, validated.json()) == (202, {"queued": 0})
    assert Proxy.objects.get().state == "new"


def test_a_proxy_form_id_past_the_integer_range_is_an_unknown_choice(staff, lenient):
    lenient.force_login(staff)
    response = lenient.post(
        "/proxies/action", {"action": "validate", "ids": [str(HUGE)]}, follow=True
    )
    assert response.status_code == 200
    assert [str(m) for m in response.context["messages"]] == [
        f"Select a valid choice. {HUGE} is not one of the available choices."
    ]


@pytest.mark.parametrize(
    "value", ["\u00b2", str(HUGE), "9" * 5000], ids=["superscript-two", "huge", "5000-digits"]
)
def test_odd_failure_ids_on_the_crawl_page_retry_nothing_by_mistake(user, lenient, value):
    """'²'.isdigit() is True but int('²') fails, and so does int() of 5,000 digits: the retry
    button's ids were a 500."""
    crawl = make_crawl(user)
    Crawl.objects.filter(pk=crawl.pk).update(state=CrawlState.FINISHED)
    failure = FailedRequest.objects.create(
        crawl=crawl, url="http://127.0.0.1:9/x", url_hash="x", failed_at=timezone.now()
    )
    lenient.force_login(user)
    response = lenient.post(f"/crawls/{crawl.pk}/retry-failed/", {"id": [value, str(failure.pk)]})
    assert response.status_code == 302
    assert not crawl.failures.exists()  # the good id was retried, the odd one skipped


@pytest.mark.parametrize("value", ["\u00b2", "\u0663", "\U0001d7d9", "9" * 5000])
def test_odd_crawl_numbers_in_the_comparison_say_they_are_not_crawl_ids(user, lenient, value):
    """'²'.isdigit() is True but int('²') fails: ?a=² was a 500 on the comparison and its CSV."""
    crawl = make_crawl(user)
    lenient.force_login(user)
    page = lenient.get("/crawls/compare/", {"a": value, "b": str(crawl.pk)})
    page_says(page, 400, "is not a crawl id.")
    csv = lenient.get("/crawls/compare/export.csv", {"a": str(crawl.pk), "b": value, "show": "new"})
    assert csv.status_code == 400 and b"is not a crawl id." in csv.content


@pytest.mark.parametrize("value", ["\u00b2", "#\u00b2", "\u0663", "#" + "9" * 150])
def test_odd_numbers_in_the_crawl_list_search_are_searched_as_text(user, lenient, value):
    """The crawl list finds crawl 12 for "12" or "#12"; "²" passed isdigit() and was a 500."""
    make_crawl(user, name="plain")
    named = make_crawl(user, name=f"odd {value}")
    lenient.force_login(user)
    response = lenient.get("/", {"q": value})
    assert response.status_code == 200
    assert [c.pk for c in response.context["page"].object_list] == [named.pk]


# == text no database stores ====================================================================


def test_a_token_name_with_a_control_character_is_refused_on_the_page(user, lenient):
    lenient.force_login(user)
    response = lenient.post("/account/tokens/", {"name": "cron\x00job"})
    page_says(response, 400, "The name may not have control characters.")
    assert not ApiToken.objects.exists()


def test_a_webhook_url_with_a_control_character_is_refused(user, client):
    crawl = make_crawl(user)
    body = {"crawl": crawl.pk, "url": "http://127.0.0.1:9/\x01hook"}
    response = post(client, "/api/webhooks/", body, **bearer(user))
    assert response.status_code == 400
    assert response.json() == {
        "url": ["Enter an http:// or https:// URL: this one has a space or a control character."]
    }
    assert not Webhook.objects.exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("seeds", "5"),
        ("seeds", '{"a": 1}'),
        ("allowed_domains", "7"),
        ("include_patterns", "[[1]]"),
    ],
)
def test_the_admin_refuses_json_of_the_wrong_shape_on_the_field(staff, lenient, field, value):
    """The admin's JSON fields take any JSON; crawl_clean used to iterate over a number."""
    staff.is_superuser = True
    staff.save()
    lenient.force_login(staff)
    data = {
        "name": "admin",
        "channel": Channel.default().pk,
        "seeds": '["http://127.0.0.1:9/"]',
        "allowed_domains": "[]",
        "include_patterns": "[]",
        "exclude_patterns": "[]",
        "max_depth": 2,
        "max_pages": 10,
        "priority": 0,
        "threads": 2,
        "slices": 1,
        "timeout": 5,
        "max_bytes": 100000,
        "max_retries": 1,
        "user_agent_mode": "",
        "user_agent": "",
        "events-TOTAL_FORMS": 0,
        "events-INITIAL_FORMS": 0,
        field: value,
    }
    response = lenient.post("/admin/crawls/crawl/add/", data)
    assert response.status_code == 200, response.status_code
    errors = response.context["adminform"].form.errors
    assert errors[field] == ["Give a list of strings, or text with one value per line."]
    assert not Crawl.objects.exists()
