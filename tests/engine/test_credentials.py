"""A crawl's credentials as people give them: headers, a Cookie header, a Netscape cookies.txt,
basic auth and the login step's settings, each refused with its field and line; and the one
rule of where they go: the origins they were bound to when entered, never another host or
port."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from crawls.engine import credentials
from crawls.engine.credentials import CredentialsError, CredentialsProblems, parse

pytestmark = pytest.mark.once  # no database

SEEDS = ["http://site.example:8080/", "https://secure.example/"]


def test_headers_are_name_value_lines():
    assert credentials.parse_headers("X-Api-Key: abc\n\nAccept-Language:  fr ") == [
        ("X-Api-Key", "abc"),
        ("Accept-Language", "fr"),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("X-Ok: 1\nno colon", "line 2: not a header; write 'Name: value' (found no colon)"),
        (": value", "line 1: not a header; write 'Name: value' (found no name before a colon)"),
        ("Bad Name: 1", "line 1: the text before the first colon is not a header name"),
        ("Content-Length: 5", "line 1: Content-Length is set by crawlhub, not here"),
        ("Cookie: a=1", "give cookies in the Cookie field"),
        ("X-Snow: ☃", "line 1: the value of X-Snow cannot be sent in an HTTP header"),
    ],
)
def test_a_bad_header_line_is_named(text, message):
    with pytest.raises(CredentialsError) as caught:
        credentials.parse_headers(text)
    assert caught.value.field == "headers"
    assert message in str(caught.value)


def test_a_cookies_txt_keeps_its_cookies_httponly_ones_included():
    text = (
        "# Netscape HTTP Cookie File\n\n"
        ".site.example\tTRUE\t/\tFALSE\t1900000000\ta\t1\n"
        "#HttpOnly_site.example\tFALSE\t/app\tTRUE\t0\tb\tx=y\n"
    )
    a, b = credentials.parse_cookies_txt(text)
    assert (a.domain, a.subdomains, a.path, a.secure, a.value) == (
        "site.example",
        True,
        "/",
        False,
        "1",
    )
    assert (b.name, b.value, b.path, b.secure) == ("b", "x=y", "/app", True)


def test_a_garbage_line_in_a_cookies_txt_is_named():
    with pytest.raises(
        CredentialsError,
        match=r"cookies.txt line 3: 7 fields separated by tabs "
        r"expected .* found 1",
    ):
        credentials.parse_cookies_txt("# comment\nsite.example\tFALSE\t/\tFALSE\t0\ta\t1\n<html>")


def test_every_bad_input_is_reported_at_once():
    with pytest.raises(CredentialsProblems) as caught:
        parse(
            SEEDS,
            {
                "headers": "nope",
                "cookie": "=1",
                "login_url": "http://elsewhere.example/login",
                "basic_password": "pw",
            },
        )
    # The login step's problems too (its URL off the seeds' hosts, no fields), in the same round.
    assert set(caught.value.problems) == {
        "headers",
        "cookie",
        "basic_user",
        "login_url",
        "login_fields",
    }


def test_the_login_url_must_be_on_a_seeds_origin():
    base = {"login_fields": "u=1"}
    assert parse(SEEDS, {**base, "login_url": "http://site.example:8080/login"}).logs_in
    for elsewhere in (
        "http://site.example/login",
        "http://other.example:8080/login",
        "ftp://site.example:8080/",
    ):
        with pytest.raises(CredentialsProblems) as caught:
            parse(SEEDS, {**base, "login_url": elsewhere})
        assert "login_url" in caught.value.problems


def test_credentials_go_to_the_seeds_origins_only():
    found = parse(
        SEEDS, {"headers": "X-Key: k", "basic_user": "u", "basic_password": "p", "cookie": "s=1"}
    )
    sent = found.headers_for("http://site.example:8080/a?b")
    assert sent["X-Key"] == "k" and sent["Authorization"].startswith("Basic ")
    assert sent["Cookie"] == "s=1"
    assert found.headers_for("https://secure.example/x")
    for elsewhere in (
        "http://site.example/",
        "http://site.example:8081/",
        "http://sub.site.example:8080/",
        "http://evil.example/?http://site.example:8080/",
        "https://site.example:8080/",
        "http://secure.example/",  # an https seed's credentials never go over http
    ):
        assert found.headers_for(elsewhere) == {}, elsewhere


def test_an_http_seed_s_credentials_follow_it_to_https_on_the_default_ports():
    found = parse(["http://plain.example/"], {"basic_user": "u", "basic_password": "p"})
    assert found.sends_to("https://plain.example/")
    assert not found.sends_to("https://plain.example:8443/")


def test_credentials_go_to_exactly_the_origins_saved_with_them_whatever_the_seeds_become():
    # A row as crawls.models.CrawlAuth holds it: bound to one origin, no https twin saved.
    row = SimpleNamespace(
        headers=[["X-Key", "k"]],
        cookies=[],
        basic_user="",
        basic_password="",
        login_url="",
        login_fields=[],
        login_check_selector="",
        login_check_url="",
        origins=[["http", "site.example", 80]],
    )
    found = credentials.from_row(row)
    assert found.sends_to("http://site.example/a") and found.sends_to("http://SITE.example:80/")
    for elsewhere in (
        "https://site.example/",
        "http://site.example:8080/",
        "http://other.example/",
    ):
        assert not found.sends_to(elsewhere), elsewhere
    bound = parse(["http://site.example/"], {"headers": "X-Key: k"})
    assert credentials.to_row_values(bound)["origins"] == [
        ["http", "site.example", 80],
        ["https", "site.example", 443],
    ]
    assert credentials.origins_left_out(
        found, ["http://site.example/", "http://b.example:81/"]
    ) == ["http://b.example:81"]
    assert credentials.origin_text(("http", "::1", 8080)) == "http://[::1]:8080"


def test_a_cookies_txt_keeps_only_the_cookies_of_the_seeds_hosts():
    text = (
        "site.example\tFALSE\t/\tFALSE\t0\tmine\t1\ntracker.example\tTRUE\t/\tFALSE\t0\ttheirs\t2\n"
    )
    found = parse(SEEDS, {"cookies_txt": text})
    assert [c.name for c in found.cookies] == ["mine"]
    with pytest.raises(CredentialsProblems, match="no cookie in cookies.txt is for the seeds"):
        parse(SEEDS, {"cookies_txt": "tracker.example\tTRUE\t/\tFALSE\t0\ttheirs\t2\n"})


def test_masked_shows_names_and_never_a_secret_value():
    found = parse(
        SEEDS,
        {
            "headers": "X-Key: hdr-value",
            "cookie": "sid=ck-value",
            "basic_user": "bob",
            "basic_password": "pw-value",
            "login_url": "http://site.example:8080/login",
            "login_fields": "user=u-value\npass=p-value",
        },
    )
    shown = repr(credentials.masked(found))
    assert "X-Key" in shown and "sid" in shown and "bob" in shown and "pass" in shown
    assert not [v for v in ("hdr", "ck-value", "pw-value", "u-value", "p-value") if v in shown]


@pytest.mark.parametrize("selector", ["a[[", "a >", "a:nth-child(x)"])
def test_a_success_selector_that_is_no_css_is_refused(selector):
    base = {"login_url": "http://site.example:8080/login", "login_fields": "u=1"}
    with pytest.raises(CredentialsProblems) as caught:
        parse(SEEDS, {**base, "login_check_selector": selector})
    assert "is not a CSS selector" in caught.value.problems["login_check_selector"]
