"""The JSON API: who may call what, every crawl action through the same services, JSON errors."""

from __future__ import annotations

import pytest
from django.test import Client

from crawlhub.redis.connections import reset_pools
from crawls import services
from crawls.engine.frontier import Frontier
from crawls.models import Channel, Crawl, CrawlState
from proxies.models import Proxy, ProxyState
from tests.support.clients import bearer, post
from tests.support.crawling import drive, make_crawl
from tests.support.proxy_jobs import import_by_api
from tests.support.sites import Response, free_port, pages_site

pytestmark = pytest.mark.django_db


# --- Authentication and visibility ------------------------------------------------------------


def test_a_request_without_credentials_gets_401_as_json(client):
    response = client.get("/api/crawls/")
    assert response.status_code == 401
    assert response["Content-Type"] == "application/json"
    assert "credentials" in response.json()["detail"].lower()
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("header", ["Bearer nope", "Bearer", "Token chk_wrong", "Bearer a b"])
def test_a_bad_token_gets_401(client, header):
    response = client.get("/api/crawls/", HTTP_AUTHORIZATION=header)
    assert response.status_code == 401
    assert response.json()["detail"]


def test_every_api_path_answers_401_to_anonymous_callers(client, user):
    crawl = make_crawl(user)
    paths = [
        "/api/",
        "/api/crawls/",
        f"/api/crawls/{crawl.pk}/",
        f"/api/crawls/{crawl.pk}/pages/",
        f"/api/crawls/{crawl.pk}/failures/",
        f"/api/crawls/{crawl.pk}/export/?format=csv",
        "/api/channels/",
        "/api/proxies/",
        "/api/pool/health/",
        "/api/tokens/",
        "/api/schema/",
    ]
    for path in paths:
        response = client.get(path)
        assert response.status_code == 401, path
        assert response["Content-Type"].startswith("application/json"), path
    assert post(client, f"/api/crawls/{crawl.pk}/start/").status_code == 401


def test_a_user_lists_their_own_crawls_and_staff_list_all(client, user, other_user, staff):
    mine, theirs = make_crawl(user, "mine"), make_crawl(other_user, "theirs")
    listed = client.get("/api/crawls/", **bearer(user)).json()
    assert [c["id"] for c in listed["results"]] == [mine.pk]
    assert listed["results"][0]["stats"]["requests"] == 0
    as_staff = client.get("/api/crawls/", **bearer(staff)).json()
    assert {c["id"] for c in as_staff["results"]} == {mine.pk, theirs.pk}


def test_another_users_crawl_is_404_for_every_door(client, user, other_user, staff):
    theirs = make_crawl(other_user, "theirs")
    auth = bearer(user)
    for path in ["", "pages/", "failures/", "export/?format=jsonl"]:
        response = client.get(f"/api/crawls/{theirs.pk}/{path}", **auth)
        assert response.status_code == 404, path
        assert response["Content-Type"] == "application/json", path
    for action in ["start", "pause", "resume", "cancel", "retry"]:
        assert post(client, f"/api/crawls/{theirs.pk}/{action}/", **auth).status_code == 404
    seeds = {"urls": ["http://127.0.0.1:9/x"]}
    assert post(client, f"/api/crawls/{theirs.pk}/seeds/", seeds, **auth).status_code == 404
    assert client.delete(f"/api/crawls/{theirs.pk}/", **auth).status_code == 404
    theirs.refresh_from_db()
    assert theirs.state == CrawlState.DRAFT
    assert theirs.seeds == ["http://127.0.0.1:9/"]
    # Staff drive anyone's crawl.
    assert client.get(f"/api/crawls/{theirs.pk}/", **bearer(staff)).status_code == 200


def test_session_auth_works_and_enforces_csrf_on_unsafe_methods(user):
    crawl = make_crawl(user)
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    assert client.get(f"/api/crawls/{crawl.pk}/").status_code == 200
    refused = post(client, f"/api/crawls/{crawl.pk}/start/")
    assert refused.status_code == 403
    assert "CSRF" in refused.json()["detail"]
    crawl.refresh_from_db()
    assert crawl.state == CrawlState.DRAFT
    # A token needs no CSRF token: it is not sent by browsers on their own.
    assert post(client, f"/api/crawls/{crawl.pk}/start/", **bearer(user)).status_code == 200


# --- Crawls -----------------------------------------------------------------------------------


def test_creating_a_crawl_with_bad_fields_names_each_field(client, user):
    response = post(
        client,
        "/api/crawls/",
        {
            "name": "x",
            "seeds": ["ftp://nope", "http://ok.example/"],
            "max_pages": 0,
            "include_patterns": ["("],
            "channel": "no-such-channel",
        },
        **bearer(user),
    )
    assert response.status_code == 400
    errors = response.json()
    assert {"max_pages", "channel"} <= set(errors)
    assert all(isinstance(messages, list) and messages for messages in errors.values())
    # Field types pass; the service then checks seeds and patterns and names them too.
    response = post(
        client,
        "/api/crawls/",
        {
            "name": "x",
            "seeds": ["ftp://nope"],
            "include_patterns": ["("],
        },
        **bearer(user),
    )
    assert response.status_code == 400
    assert set(response.json()) == {"seeds", "include_patterns"}
    assert "line 1" in response.json()["seeds"][0]
    assert not Crawl.objects.exists()


def test_a_crawl_created_and_started_through_the_api_is_in_the_frontier(client, user):
    response = post(
        client,
        "/api/crawls/",
        {
            "name": "api crawl",
            "seeds": ["http://127.0.0.1:9/a", "http://127.0.0.1:9/b"],
            "max_pages": 50,
            "obey_robots": False,
            "start": True,
        },
        **bearer(user),
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["state"] == "running"
    assert body["channel"] == "default"
    assert body["created_by"] == "alice"
    crawl = Crawl.objects.get(pk=body["id"])
    assert crawl.created_by == user and crawl.max_pages == 50
    assert crawl.events.filter(kind="started", user=user).exists()
    frontier = Frontier(crawl.pk)
    assert frontier.state() == "running"
    assert frontier.stats()["requests"] == 2
    detail = client.get(f"/api/crawls/{crawl.pk}/", **bearer(user)).json()
    assert detail["stats"]["queued"] == 2


def test_start_pause_resume_cancel_go_through_the_services(client, user):
    crawl = make_crawl(user)
    auth = bearer(user)
    base = f"/api/crawls/{crawl.pk}"
    assert post(client, f"{base}/start/", **auth).json()["state"] == "running"
    assert post(client, f"{base}/pause/", **auth).json()["state"] in ("pausing", "paused")
    assert Frontier(crawl.pk).state() == "paused"
    assert post(client, f"{base}/resume/", **auth).json()["state"] == "running"
    assert post(client, f"{base}/cancel/", **auth).json()["state"] == "cancelled"
    kinds = list(crawl.events.order_by("id").values_list("kind", flat=True))
    assert kinds == ["created", "started", "paused", "resumed", "cancelled"]


def test_an_action_the_state_forbids_is_409_with_the_reason(client, user):
    crawl = make_crawl(user)
    response = post(client, f"/api/crawls/{crawl.pk}/pause/", **bearer(user))
    assert response.status_code == 409
    assert response.json() == {"detail": "A draft crawl cannot be paused."}


def test_adding_seeds_reports_new_and_seen(client, user):
    crawl = make_crawl(user)
    auth = bearer(user)
    post(client, f"/api/crawls/{crawl.pk}/start/", **auth)
    urls = {"urls": ["http://127.0.0.1:9/", "http://127.0.0.1:9/new"]}
    response = post(client, f"/api/crawls/{crawl.pk}/seeds/", urls, **auth)
    assert response.json() == {"added": 1, "already_seen": 1, "credentials_not_sent_to": []}
    bad = post(client, f"/api/crawls/{crawl.pk}/seeds/", {"urls": ["nope"]}, **auth)
    assert bad.status_code == 400 and "seeds" in bad.json()
    empty = post(client, f"/api/crawls/{crawl.pk}/seeds/", {}, **auth)
    assert empty.status_code == 400 and "urls" in empty.json()


def test_pages_failures_and_retry_after_a_real_crawl(client, user, make_site):
    site = make_site(
        pages_site(
            {
                "/": '<a href="/ok">ok</a> <a href="/broken">broken</a>',
                "/ok": "<title>OK</title>fine",
                "/broken": Response(status=500, body="down"),
            }
        )
    )
    crawl = make_crawl(user, seeds=[site.url + "/"], max_retries=0)
    services.crawl_start(crawl=crawl, user=user)
    drive(crawl)
    auth = bearer(user)
    pages = client.get(f"/api/crawls/{crawl.pk}/pages/", **auth).json()
    assert pages["count"] == crawl.pages.count() >= 2
    assert {"url", "status", "title", "fetched_at"} <= set(pages["results"][0])
    assert "body" not in pages["results"][0]
    failures = client.get(f"/api/crawls/{crawl.pk}/failures/", **auth).json()
    assert [f["url"] for f in failures["results"]] == [site.url + "/broken"]
    retried = post(client, f"/api/crawls/{crawl.pk}/retry/", {}, **auth)
    assert retried.json() == {"retried": 1}
    crawl.refresh_from_db()
    assert crawl.state == CrawlState.RUNNING
    assert not crawl.failures.exists()


def test_redis_down_is_a_503_and_changes_nothing(client, user, settings):
    crawl = make_crawl(user)
    auth = bearer(user)
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    reset_pools()
    try:
        response = post(client, f"/api/crawls/{crawl.pk}/start/", **auth)
    finally:
        reset_pools()
    assert response.status_code == 503
    assert "Redis" in response.json()["detail"]
    crawl.refresh_from_db()
    assert crawl.state == CrawlState.DRAFT


# --- Channels ---------------------------------------------------------------------------------


def test_everyone_reads_channels_and_only_staff_write(client, user, staff):
    Channel.default()
    listed = client.get("/api/channels/", **bearer(user)).json()
    assert "default" in [c["slug"] for c in listed["results"]]
    new = {"slug": "news", "name": "News", "host_delay": 1.5}
    assert post(client, "/api/channels/", new, **bearer(user)).status_code == 403
    assert not Channel.objects.filter(slug="news").exists()
    created = post(client, "/api/channels/", new, **bearer(staff))
    assert created.status_code == 201
    assert Channel.objects.get(slug="news").host_delay == 1.5
    bad = post(
        client, "/api/channels/", {"slug": "news", "name": "", "host_delay": -1}, **bearer(staff)
    )
    assert bad.status_code == 400
    assert {"slug", "name", "host_delay"} <= set(bad.json())


def test_an_answer_that_quotes_a_lone_surrogate_it_was_sent_is_json_not_a_server_error(
    client, staff
):
    """A JSON body may carry "\\udfff", which Python reads as a lone surrogate; the error
    naming the bad choice quotes it, and UTF-8 cannot carry it: it is written escaped."""
    body = '{"slug": "s", "name": "S", "proxy_strategy": "x\\udfffy"}'
    answer = client.post("/api/channels/", body, content_type="application/json", **bearer(staff))
    assert answer.status_code == 400, answer.content[:300]
    assert "x\udfffy" in answer.json()["proxy_strategy"][0]


# --- Proxies ----------------------------------------------------------------------------------


def test_proxy_endpoints_are_staff_only(client, user):
    auth = bearer(user)
    for path in ["/api/proxies/", "/api/pool/health/"]:
        assert client.get(path, **auth).status_code == 403
    response = post(client, "/api/proxies/import/", {"text": "127.0.0.1:3128"}, **auth)
    assert response.status_code == 403
    assert not Proxy.objects.exists()


def test_staff_import_list_validate_and_remove_proxies(client, staff):
    auth = bearer(staff)
    answer, imported = import_by_api(
        client,
        {
            "text": "127.0.0.1:3128\nhttp://user:secret@127.0.0.2:8080\n"
            "not a proxy\n127.0.0.1:3128",
        },
        **auth,
    )
    assert answer.json()["state"] == "queued" and answer.json()["source"] == "api"
    assert imported.status_code == 200 and imported.json()["state"] == "done"
    report = imported.json()["report"]
    assert report["added"] == ["http://127.0.0.1:3128", "http://user:****@127.0.0.2:8080"]
    assert len(report["errors"]) == 1 and len(report["duplicates"]) == 1
    listed = client.get("/api/proxies/", **auth).json()
    assert listed["count"] == 2
    assert "secret" not in str(listed)
    both = post(client, "/api/proxies/import/", {"text": "1.2.3.4:1", "url": "http://x/"}, **auth)
    assert both.status_code == 400
    ids = [p["id"] for p in listed["results"]]
    validate = post(client, "/api/proxies/validate/", {"ids": ids[:1]}, **auth)
    assert validate.status_code == 202 and validate.json() == {"queued": 1}
    no_why = post(client, "/api/proxies/remove/", {"ids": ids}, **auth)
    assert no_why.status_code == 400 and "why" in no_why.json()
    removed = post(
        client,
        "/api/proxies/remove/",
        {
            "addresses": ["127.0.0.1:3128", "10.9.9.9:1"],
            "why": "banned everywhere",
        },
        **auth,
    )
    assert removed.json() == {"removed": ["http://127.0.0.1:3128"], "unknown": ["10.9.9.9:1"]}
    proxy = Proxy.objects.get(port=3128)
    assert proxy.state == ProxyState.REMOVED and proxy.removed_by == staff
    health = client.get("/api/pool/health/", **auth).json()
    assert {"pooled", "selectable", "channels", "counters"} <= set(health)
