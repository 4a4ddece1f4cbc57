"""A crawl's credentials through the doors: the form's Authentication section (a cookies.txt
upload included), the API and the CLI take them; bad input gets an error naming the field and
the line; and no secret comes back out, from any page, API answer, export, the audit trail or
the logs of a whole crawl behind a login and basic auth."""

from __future__ import annotations

import base64
import gzip
import json
import logging

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command

from crawls import schedules, services
from crawls.engine import credentials
from crawls.models import Channel, Crawl, CrawlAuth, CrawlEvent
from tests.support.crawling import drive
from tests.support.sites import LoginSite, Response

pytestmark = pytest.mark.django_db

HEADER_SECRET = "hdr-SECRET-1111"
COOKIE_SECRET = "ck-SECRET-2222"
TXT_SECRET = "txt-SECRET-3333"
BASIC_SECRET = "basic-SECRET-4444"
MASK = "••••• (set)"


def cookies_txt(host: str, *extra: str) -> bytes:
    lines = [
        "# Netscape HTTP Cookie File",
        f"{host}\tFALSE\t/\tFALSE\t0\tprefs\t{TXT_SECRET}",
        "other.example\tTRUE\t/\tFALSE\t0\tnot-ours\tzzz",
        *extra,
    ]
    return "\n".join(lines).encode()


def form_data(site, **changes) -> dict:
    data = {
        "name": "behind a login",
        "channel": "",
        "seeds": site.url + "/home",
        "max_depth": 20,
        "max_pages": 100,
        "priority": 0,
        "threads": 4,
        "slices": 1,
        "timeout": 10,
        "max_bytes": 1_000_000,
        "max_retries": 1,
        "keep_bodies": "on",
        "host_concurrency": 0,
        "exclude_patterns": "/logout",
        "start_now": "on",
        "headers": f"X-Api-Key: {HEADER_SECRET}",
        "cookie": f"theme=dark; ck={COOKIE_SECRET}",
        "basic_user": "bob",
        "basic_password": BASIC_SECRET,
        "login_url": site.url + "/login",
        "login_fields": f"username={LoginSite.USER}\npassword={LoginSite.PASSWORD}",
        "login_check_selector": "#logout",
    }
    data["channel"] = Channel.default().pk
    data.update(changes)
    return data


def secrets_of(login: LoginSite) -> list[str]:
    basic = base64.b64encode(f"bob:{BASIC_SECRET}".encode()).decode()
    sessions = list(login.sessions)
    assert sessions, "the site saw no login"
    return [
        HEADER_SECRET,
        COOKIE_SECRET,
        TXT_SECRET,
        BASIC_SECRET,
        LoginSite.PASSWORD,
        basic,
        "tok-123",
        *sessions,
    ]


def guarded_site(login: LoginSite):
    """The login site behind basic auth too, checking every credential arrives."""
    expected = "Basic " + base64.b64encode(f"bob:{BASIC_SECRET}".encode()).decode()

    def handler(request):
        if request.headers.get("Authorization") != expected:
            return Response(status=401)
        if request.headers.get("X-Api-Key") != HEADER_SECRET:
            return Response(status=403, body="no key")
        if f"ck={COOKIE_SECRET}" not in request.headers.get("Cookie", ""):
            return Response(status=403, body="no cookie")
        if f"prefs={TXT_SECRET}" not in request.headers.get("Cookie", ""):
            return Response(status=403, body="no cookies.txt cookie")
        return login(request)

    return handler


def test_no_secret_comes_back_out_of_a_crawl_behind_a_login(
    user_client, staff_client, user, make_site, caplog
):
    caplog.set_level(logging.DEBUG)
    pages = {"/home": '<a href="/a">a</a><a href="/b">b</a>', "/a": "<p>a</p>", "/b": "<p>b</p>"}
    login = LoginSite(pages, expire_after=3)
    site = make_site(guarded_site(login))
    upload = SimpleUploadedFile("cookies.txt", cookies_txt("127.0.0.1"), "text/plain")
    response = user_client.post("/crawls/new/", {**form_data(site), "cookies_txt": upload})
    assert response.status_code == 302, response.content.decode()[:3000]
    crawl = Crawl.objects.get()
    stored = CrawlAuth.objects.get(crawl=crawl)
    assert [c["name"] for c in stored.cookies] == [
        "theme",
        "ck",
        "prefs",
    ]  # other.example's dropped
    crawl = drive(crawl)
    assert crawl.state == "finished", crawl.error
    assert {p.url.removeprefix(site.url): p.status for p in crawl.pages.all()} == {
        "/home": 200,
        "/a": 200,
        "/b": 200,
    }
    assert login.logins >= 2  # sessions of 3 requests: logged in again

    seen: dict[str, str] = {}
    pk = crawl.pk
    for url in (
        "/",
        f"/crawls/{pk}/",
        f"/crawls/{pk}/activity",
        f"/crawls/{pk}/pages/",
        *(p.get_absolute_url() for p in crawl.pages.all()),
        *(f"/crawls/{pk}/export.{fmt}" for fmt in ("jsonl", "csv")),
        "/api/crawls/",
        f"/api/crawls/{pk}/",
        f"/api/crawls/{pk}/pages/",
        *(f"/api/crawls/{pk}/pages/{p.pk}/" for p in crawl.pages.all()),
        f"/api/crawls/{pk}/export/?format=jsonl",
    ):
        response = user_client.get(url)
        assert response.status_code == 200, url
        body = b"".join(response.streaming_content) if response.streaming else response.content
        seen[url] = body.decode()
    warc = user_client.get(f"/crawls/{pk}/export.warc")
    seen["warc"] = gzip.decompress(b"".join(warc.streaming_content)).decode("utf-8", "replace")
    seen["admin"] = staff_client.get(f"/admin/crawls/crawl/{pk}/change/").content.decode()
    seen["audit trail"] = " ".join(CrawlEvent.objects.values_list("detail", flat=True))
    seen["request headers"] = json.dumps(
        list(crawl.pages.values_list("request_headers", flat=True))
    )
    seen["logs"] = caplog.text
    for secret in secrets_of(login):
        leaks = [where for where, text in seen.items() if secret in text]
        assert not leaks, f"{secret!r} shown in {leaks}"
    # What is shown instead: names, the user, and that a value is set.
    detail = seen[f"/crawls/{pk}/"]
    assert "set (X-Api-Key)" in detail and "set (user bob, password set)" in detail
    api = json.loads(seen[f"/api/crawls/{pk}/"])["auth"]
    assert api["headers"] == {"X-Api-Key": MASK}
    assert api["cookies"] == {"theme": MASK, "ck": MASK, "prefs": MASK}
    assert (api["basic_user"], api["basic_password"]) == ("bob", MASK)
    assert api["login_fields"] == {"username": MASK, "password": MASK}
    assert "credentials: headers X-Api-Key" in seen["audit trail"]


def test_the_new_crawl_page_has_an_authentication_section_that_shows_no_secret(user_client):
    page = user_client.get("/crawls/new/").content.decode()
    assert 'enctype="multipart/form-data"' in page
    for name in credentials.INPUTS:
        assert f'name="{name}"' in page


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        (
            {"headers": f"X-Api-Key: {HEADER_SECRET}\nno colon here"},
            "headers",
            "line 2: not a header; write 'Name: value' (found no colon)",
        ),
        ({"headers": "Host: evil.example"}, "headers", "line 1: Host is set by crawlhub"),
        ({"cookie": f"ck={COOKIE_SECRET}; justaword"}, "cookie", "part 2"),
        (
            {"login_url": "http://other.example/login"},
            "login_url",
            "is not on the crawl's own hosts",
        ),
        ({"login_check_selector": "a[["}, "login_check_selector", "is not a CSS selector"),
        (
            {"basic_user": "", "basic_password": BASIC_SECRET},
            "basic_user",
            "give the user name with the password",
        ),
        ({"login_url": "", "login_check_selector": ""}, "login_fields", "give the login URL too"),
    ],
    ids=[
        "header-line",
        "header-forbidden",
        "cookie",
        "login-off-scope",
        "selector",
        "no-user",
        "fields-without-url",
    ],
)
def test_bad_credentials_are_refused_at_the_form_naming_the_field(
    user_client, make_site, changes, field, message
):
    site = make_site(LoginSite({}))
    response = user_client.post("/crawls/new/", form_data(site, **changes))
    assert response.status_code == 200
    form = response.context["form"]
    assert any(message in error for error in form.errors[field]), form.errors
    page = response.content.decode()
    assert message.replace("'", "&#x27;") in page
    for secret in (HEADER_SECRET, COOKIE_SECRET, BASIC_SECRET, LoginSite.PASSWORD):
        assert secret not in page  # not even on the page that asks to correct them
    assert "enter them again" in page
    assert not Crawl.objects.exists()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("garbage without tabs", "cookies.txt line 4: 7 fields separated by tabs expected"),
        (
            "127.0.0.1\tMAYBE\t/\tFALSE\t0\tn\tv",
            "cookies.txt line 4: the subdomains field (the second) is not TRUE or FALSE",
        ),
        (
            "127.0.0.1\tFALSE\t/\tFALSE\tsoon\tn\tv",
            "cookies.txt line 4: the expiry field (the fifth) is not a Unix time",
        ),
    ],
)
def test_a_bad_cookies_txt_is_refused_naming_its_line(user_client, make_site, line, message):
    site = make_site(LoginSite({}))
    upload = SimpleUploadedFile("cookies.txt", cookies_txt("127.0.0.1", line))
    response = user_client.post("/crawls/new/", {**form_data(site), "cookies_txt": upload})
    assert response.status_code == 200
    assert any(message in e for e in response.context["form"].errors["cookies_txt"])
    assert TXT_SECRET not in response.content.decode()


def test_a_cookies_txt_that_is_not_text_is_refused(user_client, make_site):
    site = make_site(LoginSite({}))
    upload = SimpleUploadedFile("cookies.txt", b"\x89PNG\r\n\x1a\n\xff\xfe")
    response = user_client.post("/crawls/new/", {**form_data(site), "cookies_txt": upload})
    assert "cookies.txt is not UTF-8 text" in response.context["form"].errors["cookies_txt"][0]


def test_the_api_takes_credentials_write_only_and_refuses_bad_ones(user_client, make_site):
    site = make_site(LoginSite({}))
    auth = {
        "headers": f"X-Api-Key: {HEADER_SECRET}",
        "basic_user": "bob",
        "basic_password": BASIC_SECRET,
        "cookies_txt": cookies_txt("127.0.0.1").decode(),
    }
    body = {"name": "api", "seeds": [site.url + "/"], "auth": auth}
    response = user_client.post("/api/crawls/", body, content_type="application/json")
    assert response.status_code == 201, response.content
    text = response.content.decode()
    assert all(secret not in text for secret in (HEADER_SECRET, BASIC_SECRET, TXT_SECRET))
    assert response.json()["auth"]["cookies"] == {"prefs": MASK}
    bad = {**body, "auth": {**auth, "cookies_txt": "x\ty\n", "login_url": "http://elsewhere/"}}
    response = user_client.post("/api/crawls/", bad, content_type="application/json")
    assert response.status_code == 400
    errors = response.json()
    assert "cookies.txt line 1: 7 fields separated by tabs expected" in errors["cookies_txt"][0]
    assert HEADER_SECRET not in response.content.decode()
    assert Crawl.objects.count() == 1


def test_the_cli_reads_credentials_from_files(tmp_path, make_site, capsys):
    site = make_site(LoginSite({}))
    auth = tmp_path / "auth.json"
    auth.write_text(json.dumps({"basic_user": "bob", "basic_password": BASIC_SECRET}))
    jar = tmp_path / "cookies.txt"
    jar.write_bytes(cookies_txt("127.0.0.1"))
    call_command(
        "crawl",
        "create",
        "--name",
        "cli",
        "--seed",
        site.url + "/",
        "--auth-file",
        str(auth),
        "--cookies-file",
        str(jar),
    )
    crawl = Crawl.objects.get()
    assert services.credentials_shown(crawl)["basic_password"] == MASK
    assert [c["name"] for c in crawl.auth.cookies] == ["prefs"]
    auth.write_text("{not json")
    with pytest.raises(CommandError, match="--auth-file: .* is not valid JSON"):
        call_command(
            "crawl", "create", "--name", "cli", "--seed", site.url + "/", "--auth-file", str(auth)
        )
    auth.write_text(json.dumps({"password": "x"}))
    with pytest.raises(CommandError, match="unknown: password"):
        call_command(
            "crawl", "create", "--name", "cli", "--seed", site.url + "/", "--auth-file", str(auth)
        )


def test_a_schedule_run_keeps_its_template_s_credentials_unseen(user, make_site):
    site = make_site(LoginSite({}))
    template = services.crawl_create(
        user=user,
        name="nightly",
        seeds=[site.url + "/"],
        auth={"basic_user": "bob", "basic_password": BASIC_SECRET, "cookie": f"ck={COOKIE_SECRET}"},
    )
    schedule = schedules.schedule_create(user=user, template=template, cron="@daily")
    run = schedules.schedule_run(schedule=schedule)
    assert run.pk != template.pk
    assert run.auth.basic_password == BASIC_SECRET
    assert run.auth.cookies == template.auth.cookies
    assert services.credentials_shown(run) == services.credentials_shown(template)
