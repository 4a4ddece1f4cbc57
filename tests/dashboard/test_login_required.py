"""Login is required on every page, API and websocket; proxies are staff-only."""

import json

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from crawlhub.web.consumers import CLOSE_FORBIDDEN
from tests.support.clients import session_cookie, ws_connect

# Pages reachable without a session, on purpose.
PUBLIC = {
    "/login/",
    "/healthz",
    "/favicon.ico",
    "/admin/login/",
    "/proxies/echo",
    "/sample/",
    "/sample/x",
}
# The admin and django-rq have their own staff login: anonymous users are sent there.
STAFF_LOGIN_PREFIXES = ("/admin/", "/rq/")


def example_paths(patterns=None, prefix: str = "") -> list[str]:
    """Every URL pattern as a concrete path, with 1 (or 'x') for each parameter."""
    paths = []
    for entry in patterns if patterns is not None else get_resolver().url_patterns:
        route = str(entry.pattern)
        concrete = route.replace("^", "").replace("$", "").replace("\\Z", "").replace("\\", "")
        for converter in ("<int:", "<str:", "<slug:", "<path:", "<uuid:", "<"):
            while converter in concrete:
                start = concrete.index(converter)
                end = concrete.index(">", start)
                filler = "1" if converter in ("<int:", "<") else "x"
                concrete = concrete[:start] + filler + concrete[end + 1 :]
        if isinstance(entry, URLResolver):
            paths += example_paths(entry.url_patterns, prefix + concrete)
        elif isinstance(entry, URLPattern) and "(?P" not in concrete and "(" not in concrete:
            paths.append("/" + prefix + concrete)
    return sorted(set(paths))


ALL_PATHS = example_paths()


def test_the_url_list_covers_every_app():
    assert {"/", "/workers/", "/proxies/", "/healthz", "/admin/"} <= set(ALL_PATHS)


@pytest.mark.django_db
@pytest.mark.parametrize("path", [p for p in ALL_PATHS if p not in PUBLIC])
def test_anonymous_users_are_sent_to_a_login_page(client, path):
    response = client.get(path)
    assert response.status_code in (301, 302, 401, 403), path
    if response.status_code in (301, 302):
        location = response["Location"]
        if path.startswith(STAFF_LOGIN_PREFIXES):
            assert "/login/" in location, (path, location)
        else:
            assert location.startswith("/login/?next="), (path, location)


@pytest.mark.django_db
def test_login_page_logs_a_user_in(client, user):
    from tests.support.clients import PASSWORD

    page = client.get("/login/")
    assert page.status_code == 200
    response = client.post("/login/", {"username": "alice", "password": PASSWORD})
    assert response.status_code == 302
    assert client.get("/workers/").status_code == 200


@pytest.mark.django_db
def test_wrong_password_is_refused(client, user):
    response = client.post("/login/", {"username": "alice", "password": "nope"})
    assert response.status_code == 200
    assert b"didn't match" in response.content
    assert client.get("/workers/").status_code == 302


@pytest.mark.django_db
def test_logout_needs_a_post_and_ends_the_session(user_client):
    assert user_client.get("/workers/").status_code == 200
    user_client.post("/logout/")
    assert user_client.get("/workers/").status_code == 302


@pytest.mark.django_db
def test_proxies_page_is_for_staff_only(user_client, staff_client):
    refused = user_client.get("/proxies/")
    assert refused.status_code == 403
    assert b"Only staff" in refused.content
    assert staff_client.get("/proxies/").status_code == 200


@pytest.mark.django_db
def test_rq_dashboard_is_for_staff_only(user_client, staff_client):
    assert user_client.get("/rq/").status_code == 302
    assert staff_client.get("/rq/").status_code == 200


@pytest.mark.django_db
def test_navigation_shows_staff_links_to_staff_only(user_client, staff_client):
    page = user_client.get("/workers/").content.decode()
    assert 'href="/workers/"' in page and 'href="/proxies/"' not in page
    page = staff_client.get("/workers/").content.decode()
    assert 'href="/proxies/"' in page and 'href="/admin/"' in page


@pytest.mark.django_db(transaction=True)
async def test_websocket_refuses_anonymous_users():
    communicator, connected, code = await ws_connect("/ws/health/")
    assert not connected
    assert code == CLOSE_FORBIDDEN


@pytest.mark.django_db(transaction=True)
async def test_websocket_refuses_a_foreign_origin(user_client):
    communicator, connected, _ = await ws_connect(
        "/ws/health/", session_cookie(user_client), origin="http://evil.example"
    )
    assert not connected


@pytest.mark.django_db(transaction=True)
async def test_websocket_sends_health_to_a_signed_in_user(user_client):
    communicator, connected, _ = await ws_connect("/ws/health/", session_cookie(user_client))
    assert connected
    message = json.loads(await communicator.receive_from(timeout=5))
    assert message["type"] == "health"
    assert message["redis"]["ok"] is True
    await communicator.disconnect()
