"""Who may do what, over every URL pattern and websocket route there is; CSRF on every form;
proxy passwords never shown; production settings pass `check --deploy`.

Routes are enumerated (Django's URL resolver, crawlhub.routing.websocket_urlpatterns), never
listed here: a new route that POLICY below does not classify fails the matrix until someone
says who may use it.
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import string
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin

import lxml.html
import pytest
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.test import Client
from django.urls import NoReverseMatch, URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone

from crawlhub import routing
from crawls import alerts, schedules, services, webhooks
from crawls.models import Alert, Channel, Crawl, Page
from proxies import services as proxy_services
from proxies.models import Proxy
from tests.support.clients import WS_CONNECT_SECONDS
from tests.support.proxy_jobs import import_on_the_page

ROOT = Path(__file__).resolve().parents[2]
SECRET = "secretpass"

# -- the policy ------------------------------------------------------------------------------
# Kinds of route, and who may use them:
#   public      anyone (login, health, the proxy echo, the sample site)
#   page        signed-in users; anonymous users go to /login/; a crawl of someone else is 404
#   staff_page  staff; users get 403; anonymous users go to /login/
#   admin       Django admin and django-rq: staff, anyone else goes to the admin's login
#   api         signed-in users (token or session); anonymous 401; someone else's crawl 404
#   staff_api   staff; users 403; anonymous 401
#   api_staff_writes  api for reading; writing (POST) is staff_api
#   owner_page, owner_api  page, api; but the crawl's owner only: staff, who may see every
#               crawl, get 403 (entering a crawl's credentials: they are the owner's)
#   logout      anyone; it ends a session, if there is one, and goes to a login page
# Keyed by URL name (namespace included) or, for unnamed routes, "route:<route>"; the first
# matching prefix wins.
POLICY: list[tuple[str, str]] = [
    ("admin:login", "public"),
    ("admin:logout", "logout"),
    ("admin:", "admin"),
    ("rq_", "admin"),
    ("django_rq", "admin"),
    ("api-proxy", "staff_api"),
    ("api-pool-health", "staff_api"),
    ("api-channel", "api_staff_writes"),
    ("api-crawl-credentials", "owner_api"),
    ("api-", "api"),
    ("proxy_echo", "public"),
    ("proxy_", "staff_page"),
    ("login", "public"),
    ("healthz", "public"),
    ("favicon", "public"),
    ("sample_site", "public"),
    ("route:sample/", "public"),
    ("logout", "logout"),
    ("crawl_credentials", "owner_page"),
    ("crawl_", "page"),
    ("page_", "page"),
    ("rules_preview", "page"),
    ("schedule_", "page"),
    ("webhook_", "page"),
    ("alert_rule_", "page"),
    ("workers", "page"),
    ("api_token", "page"),
    ("api_docs", "page"),
]
WS_STAFF_ONLY = ("ws/proxies/",)


def kind_of(key: str) -> str | None:
    return next((kind for prefix, kind in POLICY if key.startswith(prefix)), None)


@dataclass
class Route:
    key: str  # name with namespace, or "route:<route>"
    regex: str  # the full pattern, for filling in
    kind: str | None


def all_routes(patterns=None, prefix: str = "", namespace: str = "") -> list[Route]:
    routes = []
    for entry in patterns if patterns is not None else get_resolver().url_patterns:
        if isinstance(entry, URLResolver):
            ns = namespace
            if entry.namespace:
                ns = f"{namespace}{entry.namespace}:"
            routes += all_routes(entry.url_patterns, prefix + _regex(entry.pattern), ns)
        elif isinstance(entry, URLPattern):
            route = prefix + _regex(entry.pattern)
            if entry.name:
                key = namespace + entry.name
            else:
                key = namespace + "route:" + str(entry.pattern)
            routes.append(Route(key=key, regex=route, kind=kind_of(key)))
    return routes


def _regex(pattern) -> str:
    return pattern.regex.pattern.lstrip("^").removesuffix("\\Z").removesuffix("$")


@dataclass
class World:
    own_crawl: Crawl
    foreign_crawl: Crawl
    proxy: Proxy
    token_id: int
    channel: Channel
    # The user's own schedule, webhook and token, and someone else's (the foreign variants).
    own: dict[str, int]
    foreign: dict[str, int]


PARAMS = {
    "action": "cancel",
    "fmt": "jsonl",
    "format": "json",
    "path": "p/1",
    "app_label": "crawls",
    "url": "nowhere/",
    "queue_index": "0",
    "scheduler_index": "0",
    "connection_index": "0",
}
# THIRD_PARTY_500S: django-rq answers 500 to staff for a job, worker or scheduler that does not
# exist, so for admin routes with parameters only who is kept out is checked, not what staff get.


def fill(route: Route, world: World, *, foreign: bool = False) -> str | None:
    """A concrete path for the route, parameters filled with ids of real objects."""
    crawl = world.foreign_crawl if foreign else world.own_crawl
    objects = world.foreign if foreign else world.own
    key = route.key

    def value(name: str) -> str:
        if name in ("pk", "object_id"):
            if "proxy" in key or "proxies_proxy" in key:
                return str(world.proxy.pk)
            if "crawls_channel" in key:
                return str(world.channel.pk)
            if key.startswith(("alert_rule_", "api-alert-rule-")):
                return str(objects["alert_rule"])
            if key.startswith("api-alert-"):
                return str(objects["alert"])
            for kind in ("schedule", "webhook", "token"):
                if kind in key and not key.startswith("admin:"):
                    return str(objects[kind])
            if "crawl" in key or key.startswith("page_"):
                return str(crawl.pk)
            return "999999"  # other admin models: a missing one
        if name == "page_pk":
            return str(objects["page"])
        if name == "slug":
            return world.channel.slug
        if name == "content_type_id":
            return str(ContentType.objects.get_for_model(Crawl).pk)
        return PARAMS.get(name, "x")

    names = list(re.compile(route.regex).groupindex)
    if "route:" not in key:
        try:
            return reverse(key, kwargs={name: value(name) for name in names})
        except NoReverseMatch:
            return None
    # Unnamed routes: fill the groups in the pattern itself.
    path = re.sub(r"\(\?P<(\w+)>[^)]*\)", lambda m: value(m.group(1)), route.regex)
    path = path.replace("\\", "")
    return None if re.search(r"[()\[\]*+?^$|]", path) else "/" + path


@pytest.fixture
def world(user, other_user, staff) -> World:
    from crawlhub import tokens

    own = services.crawl_create(user=user, name="mine", seeds=["http://example.com/"])
    foreign = services.crawl_create(user=other_user, name="theirs", seeds=["http://e.org/"])
    proxy_services.import_proxies(
        text=f"http://puser:{SECRET}@1.2.3.4:8080", source="test", user=staff
    )
    token, _ = tokens.token_create(user=user, name="t")
    their_token, _ = tokens.token_create(user=other_user, name="theirs")
    owned = {}
    for who, crawl, token_id in ((user, own, token.pk), (other_user, foreign, their_token.pk)):
        schedule = schedules.schedule_create(user=who, template=crawl, cron="0 3 * * *")
        hook, _ = webhooks.webhook_create(
            user=who, url="http://127.0.0.1:9/hook", events=["finished"], crawl=crawl
        )
        page = Page.objects.create(
            crawl=crawl,
            url=crawl.seeds[0],
            url_hash=f"h{crawl.pk}",
            status=200,
            fetched_at=timezone.now(),
            body=b"<h1>a kept body</h1>",
        )
        rule = alerts.rule_create(user=who, crawl=crawl, kind="no_progress", minutes=5)
        alert = Alert.objects.create(
            rule=rule, crawl=crawl, kind=rule.kind, line="No progress", fired_at=timezone.now()
        )
        owned[who.pk] = {
            "schedule": schedule.pk,
            "webhook": hook.pk,
            "token": token_id,
            "page": page.pk,
            "alert_rule": rule.pk,
            "alert": alert.pk,
        }
    return World(
        own,
        foreign,
        Proxy.objects.get(),
        token.pk,
        Channel.default(),
        own=owned[user.pk],
        foreign=owned[other_user.pk],
    )


def client_for(who) -> Client:
    client = Client(raise_request_exception=False)  # a 500 is an answer to report
    if who is not None:
        client.force_login(who)
    return client


def refused_by_login(response, path: str) -> bool:
    return response.status_code == 302 and "/login/" in response["Location"]


def check(kind: str, role: str, response, *, foreign: bool, method: str) -> str:
    """'' when the answer is what the policy says; else what is wrong."""
    code = response.status_code
    if code >= 500:
        return f"server error {code}"
    if kind == "api_staff_writes":
        kind = "staff_api" if method == "post" else "api"
    if kind.startswith("owner_"):
        if role == "staff" and code != 405:  # the crawls in the world are not staff's own
            return "" if code == 403 else f"staff got {code} from an owner-only route, not 403"
        kind = kind.removeprefix("owner_")
    login = code == 302 and "/login/" in response.get("Location", "")
    refused = login or code in (401, 403)
    if kind == "logout":
        return ""
    if kind == "public":
        return "" if not refused else f"public route refused ({code})"
    if role == "anonymous":
        if kind in ("api", "staff_api"):
            return "" if code == 401 else f"anonymous API call got {code}, not 401"
        if kind == "admin":
            return "" if refused else f"anonymous admin call got {code}, not refused"
        ok = login and response["Location"].startswith("/login/?next=")
        return "" if ok else f"anonymous got {code}, not the login page"
    if code == 405:
        return ""  # the wrong method for this route: refused before any object is looked up
    if kind == "admin" and role == "staff":
        # Let in (not sent to a login page); a 403 here is Django's per-model permissions.
        return "" if not login else "staff sent to the admin login"
    staff_only = kind in ("staff_page", "staff_api", "admin")
    if role == "user" and staff_only:
        if kind == "admin":
            return "" if refused else f"user got {code} from the admin, not refused"
        return "" if code == 403 else f"user got {code} from a staff-only route, not 403"
    if role == "user" and foreign:
        return "" if code == 404 else f"user got {code} for someone else's object, not 404"
    if role == "user" and code == 404 and kind in ("page", "api"):
        return "the owner got 404 for their own object"
    if refused:
        return f"{role} was refused ({code})"
    return ""


# Routes whose POST removes the object: each request gets crawls of its own, so that what one
# role deleted is not missing for the next request.
DELETES = {"crawl_delete"}


def fresh_crawls(world: World) -> World:
    """The world with a new own and foreign crawl, made like the first two."""
    own, foreign = (
        services.crawl_create(user=crawl.created_by, name=crawl.name, seeds=crawl.seeds)
        for crawl in (world.own_crawl, world.foreign_crawl)
    )
    return dataclasses.replace(world, own_crawl=own, foreign_crawl=foreign)


def walk(world: World, users: dict, *, skip_foreign: set[str] | None = None):
    """Every route x role x (own, foreign) x method; yields (problem, where)."""
    clients = {role: client_for(who) for role, who in users.items()}
    for route in all_routes():
        if route.kind is None:
            yield "not classified in POLICY", route.key
            continue
        owned = any(
            kind in route.key for kind in ("crawl", "schedule", "webhook", "token", "alert")
        )
        takes_id = "pk" in route.regex or "object_id" in route.regex
        both = owned and takes_id and route.kind in ("page", "api")
        variants = [False, True] if both else [False]
        for foreign in variants:
            if foreign and skip_foreign is not None and route.key in skip_foreign:
                continue
            path = fill(route, world, foreign=foreign)
            if path is None:
                yield "cannot fill the pattern", route.key
                continue
            methods = ["get"] if route.kind in ("admin",) else ["get", "post"]
            for role, client in clients.items():
                for method in methods:
                    if route.kind == "admin" and role == "staff" and "(?P<" in route.regex:
                        continue  # see THIRD_PARTY_500S
                    if route.kind == "logout":
                        client = client_for(users[role])  # it ends the session
                    if route.key in DELETES:
                        path = fill(route, fresh_crawls(world), foreign=foreign)
                    response = getattr(client, method)(path)
                    problem = check(route.kind, role, response, foreign=foreign, method=method)
                    if problem:
                        yield problem, f"{method.upper()} {path} as {role} ({route.key})"


# -- the matrix ------------------------------------------------------------------------------


def test_every_route_is_classified_and_the_list_is_real():
    routes = all_routes()
    keys = {r.key for r in routes}
    assert {"crawl_list", "crawl_detail", "proxy_list", "login", "admin:index"} <= keys
    assert [r.key for r in routes if r.kind is None] == []


@pytest.mark.django_db
@pytest.mark.slow
def test_authorization_matrix_over_every_url_pattern(world, user, staff):
    users = {"anonymous": None, "user": user, "staff": staff}
    problems = [f"{where}: {problem}" for problem, where in walk(world, users)]
    assert not problems, "\n".join(problems)


@pytest.mark.django_db
def test_a_user_cannot_see_or_drive_someone_elses_crawl_on_the_pages(world, user):
    client = client_for(user)
    pk = world.foreign_crawl.pk
    assert client.get(f"/crawls/{pk}/").status_code == 404
    assert client.get(f"/crawls/{pk}/snapshot.json").status_code == 404
    assert client.post(f"/crawls/{pk}/cancel/").status_code == 404
    world.foreign_crawl.refresh_from_db()
    assert world.foreign_crawl.state == "draft"


@pytest.mark.django_db
def test_the_matrix_catches_a_route_that_lets_anyone_in(world, user, staff, settings):
    """The check itself can fail: a staff-only page answered 200 to a user is reported."""
    response = client_for(staff).get("/proxies/")
    assert check("staff_page", "user", response, foreign=False, method="get") != ""
    response = client_for(None).get("/healthz")
    assert check("page", "anonymous", response, foreign=False, method="get") != ""


@pytest.mark.django_db
def test_api_tokens_work_only_for_their_own_user(world, user, other_user):
    from crawlhub import tokens

    _, raw = tokens.token_create(user=user, name="mine")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    client = Client()
    listed = client.get("/api/crawls/", **auth).json()
    assert [c["id"] for c in listed["results"]] == [world.own_crawl.pk]
    assert client.get(f"/api/crawls/{world.foreign_crawl.pk}/", **auth).status_code == 404
    assert client.post(f"/api/crawls/{world.foreign_crawl.pk}/cancel/", **auth).status_code == 404
    assert client.get("/api/proxies/", **auth).status_code == 403
    tokens_seen = client.get("/api/tokens/", **auth).json()
    names = [t["name"] for t in tokens_seen.get("results", tokens_seen)]
    assert sorted(names) == ["mine", "t"]
    _, theirs = tokens.token_create(user=other_user, name="bob's")
    mine_again = client.get("/api/tokens/", **auth).json()
    assert "bob's" not in str(mine_again)
    # Revoking someone else's token through the page or the API is a 404, and it still works.
    theirs_id = other_user.api_tokens.get(name="bob's").pk
    assert client_for(user).post(f"/account/tokens/{theirs_id}/revoke").status_code == 404
    assert client.delete(f"/api/tokens/{theirs_id}/", **auth).status_code == 404
    them = {"HTTP_AUTHORIZATION": f"Bearer {theirs}"}
    assert Client().get("/api/crawls/", **them).status_code == 200


# -- websockets ------------------------------------------------------------------------------


def ws_routes() -> list[str]:
    return [str(p.pattern) for p in routing.websocket_urlpatterns]


def ws_path(route: str, crawl_id: int) -> str:
    return "/" + re.sub(r"<(\w+:)?(\w+)>", lambda m: str(crawl_id), route)


async def ws_try(
    path: str,
    *,
    client: Client | None,
    origin: str | None,
    host: str = "127.0.0.1:8000",
    extra: list[tuple[bytes, bytes]] = (),
) -> bool:
    """Whether the full ASGI app accepts a websocket that a browser on a page of `origin`
    opens to `host` (the address it connects to), signed in as `client` (if given)."""
    from crawlhub.asgi import application

    headers = [(b"host", host.encode()), *extra]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    if client is not None:
        cookie = "; ".join(f"{k}={v.value}" for k, v in client.cookies.items())
        headers.append((b"cookie", cookie.encode()))
    communicator = WebsocketCommunicator(application, path, headers=headers)
    try:
        connected, _ = await communicator.connect(timeout=WS_CONNECT_SECONDS)
    finally:
        await communicator.disconnect()
    return connected


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
async def test_websocket_matrix_over_every_route(user, staff):
    from asgiref.sync import sync_to_async

    crawl = await sync_to_async(services.crawl_create)(
        user=user, name="mine", seeds=["http://example.com/"]
    )
    user_client, staff_client = (
        await sync_to_async(client_for)(user),
        await sync_to_async(client_for)(staff),
    )
    good = "http://127.0.0.1:8000"
    problems = []
    routes = ws_routes()
    assert "ws/health/" in routes and "ws/proxies/" in routes
    for route in routes:
        path = ws_path(route, crawl.pk)
        staff_only = route.startswith(WS_STAFF_ONLY)
        expected = {
            ("anonymous", good): False,
            ("user", good): not staff_only,
            ("staff", good): True,
            ("staff", "http://evil.example"): False,
            ("staff", None): False,
            ("user", "https://127.0.0.1.evil.example"): False,
        }
        clients = {"anonymous": None, "user": user_client, "staff": staff_client}
        for (role, origin), allowed in expected.items():
            got = await ws_try(path, client=clients[role], origin=origin)
            if got != allowed:
                problems.append(f"{path} as {role} from {origin}: connected={got}")
    assert problems == []


@pytest.mark.django_db(transaction=True)
async def test_a_websocket_opens_only_from_a_page_of_the_same_scheme_host_and_port(staff, settings):
    """Channels' AllowedHostsOriginValidator compared host names only: a page on another port
    of the same host (another app, another user's server on a shared machine) could open the
    dashboard's websockets with the signed-in user's cookies. The Origin must be the
    dashboard's own, scheme, host and port (or one of CSRF_TRUSTED_ORIGINS)."""
    from asgiref.sync import sync_to_async

    client = await sync_to_async(client_for)(staff)
    path = "/ws/health/"
    same = {
        ("http://127.0.0.1:8000", "127.0.0.1:8000"),
        ("http://localhost:8000", "LOCALHOST:8000"),
        ("http://127.0.0.1", "127.0.0.1"),
        ("http://127.0.0.1:80", "127.0.0.1"),
        ("http://[::1]:8000", "[::1]:8000"),
    }
    other = {
        ("http://127.0.0.1:8001", "127.0.0.1:8000"),  # another port of the same host
        ("http://127.0.0.1", "127.0.0.1:8000"),
        ("http://127.0.0.1:8000", "127.0.0.1"),
        ("https://127.0.0.1:8000", "127.0.0.1:8000"),  # another scheme
        ("http://localhost:8000", "127.0.0.1:8000"),  # another host, in ALLOWED_HOSTS too
        ("http://evil.example:8000", "evil.example:8000"),  # a host not in ALLOWED_HOSTS
        ("http://user@127.0.0.1:8000", "127.0.0.1:8000"),
        ("http://127.0.0.1:8000/page", "127.0.0.1:8000"),
        ("http://127.0.0.1:99999", "127.0.0.1:99999"),
        ("null", "127.0.0.1:8000"),
        ("", "127.0.0.1:8000"),
        (None, "127.0.0.1:8000"),
    }
    problems = []
    for cases, allowed in ((same, True), (other, False)):
        for origin, host in sorted(cases, key=str):
            if await ws_try(path, client=client, origin=origin, host=host) != allowed:
                problems.append(f"{origin} to {host}: expected connected={allowed}")
    # Behind a proxy that ends TLS: the scheme is the one the proxy says, as for Django's CSRF.
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    tls = [(b"x-forwarded-proto", b"https")]
    for origin, allowed in (("https://127.0.0.1:8000", True), ("http://127.0.0.1:8000", False)):
        if await ws_try(path, client=client, origin=origin, extra=tls) != allowed:
            problems.append(f"{origin} behind TLS: expected connected={allowed}")
    # A public name the proxy serves the dashboard on, given in CSRF_TRUSTED_ORIGINS.
    settings.CSRF_TRUSTED_ORIGINS = ["https://crawl.example.com", "https://*.example.org"]
    for origin, allowed in (
        ("https://crawl.example.com", True),
        ("https://crawl.example.com:443", True),
        ("https://crawl.example.com:8443", False),
        ("http://crawl.example.com", False),
        ("https://a.example.org", True),
        ("https://example.org.evil.example", False),
    ):
        if await ws_try(path, client=client, origin=origin) != allowed:
            problems.append(f"{origin} (trusted origins): expected connected={allowed}")
    assert problems == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
async def test_a_user_cannot_watch_someone_elses_crawl_live(user, other_user):
    from asgiref.sync import sync_to_async

    theirs = await sync_to_async(services.crawl_create)(
        user=other_user, name="theirs", seeds=["http://example.com/"]
    )
    client = await sync_to_async(client_for)(user)
    path = f"/ws/crawls/{theirs.pk}/"
    assert not await ws_try(path, client=client, origin="http://127.0.0.1:8000")


# -- CSRF ------------------------------------------------------------------------------------


def staff_pages(world: World) -> list[str]:
    """Every page of the app (not the admin or django-rq) that renders for staff."""
    paths = []
    for route in all_routes():
        if route.kind in ("page", "staff_page", "public") and not route.key.startswith("admin:"):
            path = fill(route, world)
            if path is not None:
                paths.append(path)
    return sorted(set(paths))


@pytest.mark.django_db
def test_every_post_form_carries_a_csrf_token_and_is_refused_without_it(world, staff):
    client = client_for(staff)
    actions: set[str] = set()
    missing = []
    forms_seen = 0
    for path in staff_pages(world):
        response = client.get(path)
        if response.status_code != 200 or "html" not in response.get("Content-Type", ""):
            continue
        for form in lxml.html.fromstring(response.content).forms:
            if (form.method or "get").lower() != "post":
                continue
            forms_seen += 1
            if "csrfmiddlewaretoken" not in form.fields:
                missing.append(f"{path}: form to {form.get('action')!r}")
            actions.add(urljoin(path, form.get("action") or path))
    assert missing == []
    assert forms_seen >= 5 and {"/logout/", "/crawls/new/", "/proxies/import"} <= actions
    # Not only the forms that happened to render: every route of the app, POSTed to without a
    # token by a signed-in staff user, is refused before its view runs.
    routes = {fill(r, world) for r in all_routes() if r.kind in ("page", "staff_page", "logout")}
    targets = sorted(actions | {path for path in routes if path is not None})
    assert len(targets) > len(actions)
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(staff)
    accepted = [a for a in targets if strict.post(a, {}).status_code != 403]
    assert accepted == []
    assert Client(enforce_csrf_checks=True).post("/login/", {}).status_code == 403


@pytest.mark.django_db
def test_a_form_refused_by_the_csrf_check_gets_crawlhub_s_page_without_inline_style(user):
    """CSRF_FAILURE_VIEW: crawlhub's 403 page with the nav way back and what to do, not
    Django's, whose inline <style> the Content-Security-Policy refuses."""
    refused = Client(enforce_csrf_checks=True).post("/login/", {"username": "alice"})
    html = refused.content.decode()
    assert refused.status_code == 403
    assert "out-of-date security token" in html and "CSRF cookie not set" in html, html
    assert "<style" not in html and "Back to the crawls" in html


@pytest.mark.django_db
def test_the_api_refuses_a_session_post_without_csrf_but_not_a_token_post(world, user):
    from crawlhub import tokens

    strict = Client(enforce_csrf_checks=True)
    strict.force_login(user)
    body = {"name": "x", "seeds": ["http://example.com/"]}
    refused = strict.post("/api/crawls/", body, content_type="application/json")
    assert refused.status_code == 403 and "CSRF" in refused.json()["detail"]
    _, raw = tokens.token_create(user=user, name="ci")
    ok = Client(enforce_csrf_checks=True).post(
        "/api/crawls/", body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {raw}"
    )
    assert ok.status_code == 201, ok.content


# -- proxy credentials -----------------------------------------------------------------------


@pytest.mark.django_db
def test_proxy_passwords_are_never_rendered(world, staff, capsys):
    client = client_for(staff)
    proxy = world.proxy
    assert proxy.password == SECRET  # stored, so the pages could show it
    paths = {p for p in staff_pages(world)} | {
        "/proxies/?all=1",
        f"/proxies/{proxy.pk}/",
        "/admin/proxies/proxy/",
        f"/admin/proxies/proxy/{proxy.pk}/change/",
        f"/admin/proxies/proxy/{proxy.pk}/history/",
        "/api/proxies/",
        f"/api/proxies/{proxy.pk}/",
        "/api/proxies/?state=new",
        "/api/pool/health/",
        "/api/schema/",
    }
    shown = []
    checked = 0
    for path in sorted(paths):
        response = client.get(path)
        if response.status_code == 200:
            checked += 1
            body = b"".join(response) if response.streaming else response.content
            if SECRET.encode() in body:
                shown.append(path)
    assert checked >= 10 and shown == []
    # The masked form is what is shown, so the check above is looking at the right rows.
    assert b"puser:****@1.2.3.4:8080" in client.get("/proxies/").content
    # A repeat import reports the duplicate, masked; the CLI listing is masked too.
    again = import_on_the_page(client, {"text": f"http://puser:{SECRET}@1.2.3.4:8080"})
    assert SECRET.encode() not in again.content and b"puser:****@" in again.content
    call_command("proxies", "list", "--json")
    assert SECRET not in capsys.readouterr().out


# -- Content-Security-Policy -----------------------------------------------------------------

CSP_DIRECTIVES = {
    "script-src": "'self'",
    "style-src": "'self'",
    "frame-ancestors": "'none'",
    "object-src": "'none'",
    "base-uri": "'self'",
    "form-action": "'self'",
    "connect-src": "'self' ws://testserver",
}


def csp_of(response) -> dict[str, str]:
    header = response.get("Content-Security-Policy", "")
    return dict(
        (part.strip().split(" ", 1) + [""])[:2] for part in header.split(";") if part.strip()
    )


@pytest.mark.slow
@pytest.mark.django_db
def test_every_page_has_a_strict_content_security_policy_and_nothing_inline(world, staff, user):
    """Every page of the app, as staff and as a user: the policy allows no inline script or
    style, and the page has none (a <script> without src runs nothing only as JSON data)."""
    problems = []
    for client in (client_for(staff), client_for(user), client_for(None)):
        for path in [*staff_pages(world), "/login/", "/admin/", "/admin/crawls/crawl/"]:
            response = client.get(path)
            policy = csp_of(response)
            wrong = {k: policy.get(k) for k, v in CSP_DIRECTIVES.items() if policy.get(k) != v}
            if wrong:
                problems.append(f"{path} ({response.status_code}): {wrong}")
            if response.status_code != 200 or "html" not in response.get("Content-Type", ""):
                continue
            html = lxml.html.fromstring(response.content)
            for script in html.iter("script"):
                if not script.get("src") and script.get("type") != "application/json":
                    problems.append(f"{path}: inline <script> {script.text[:60]!r}")
            for element in html.iter():
                for name in element.attrib:
                    if name == "style" or name.startswith("on"):
                        problems.append(f"{path}: <{element.tag} {name}=...>")
    assert problems == []
    # The websocket origin follows the scheme and host the page was served on.
    secure = Client(HTTP_HOST="127.0.0.1:8000").get("/login/", secure=True)
    assert csp_of(secure)["connect-src"] == "'self' wss://127.0.0.1:8000"
    # django-rq's dashboard (staff only) has inline scripts and handlers of its own.
    rq = csp_of(client_for(staff).get("/rq/"))
    assert rq["script-src"] == "'self' 'unsafe-inline'" and rq["frame-ancestors"] == "'none'"


# -- production settings ---------------------------------------------------------------------


@pytest.mark.slow
def test_production_settings_pass_check_deploy(tmp_path):
    alphabet = string.ascii_letters + string.digits + "!@#%^&*(-_=+)"
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env.update(
        DEBUG="0",
        CRAWLHUB_HTTPS="1",
        SECRET_KEY="".join(secrets.choice(alphabet) for _ in range(50)),
        ALLOWED_HOSTS="crawl.example.com",
        CRAWLHUB_DATA_DIR=str(tmp_path),
    )
    command = [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout
    # ... and the same check does fail when production is misconfigured.
    env["CRAWLHUB_HTTPS"] = "0"
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "security.W004" in result.stderr + result.stdout


def test_anonymous_user_is_never_staff():
    # The matrix relies on AnonymousUser answering False for both.
    assert not AnonymousUser().is_authenticated and not AnonymousUser().is_staff
