"""Crawl scope: allowed domains, include/exclude patterns, and URL validation messages."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from crawlhub.http.urls import url_problem, validate_url
from crawls import services
from crawls.engine.patterns import Pattern
from crawls.engine.scope import Scope, ScopeError, compile_patterns


def scope(
    seeds: tuple[str, ...] = ("https://example.com/",),
    domains: tuple[str, ...] = (),
    include: tuple[str, ...] = (),
    exclude: tuple[str, ...] = (),
) -> Scope:
    return Scope(
        seeds=list(seeds),
        allowed_domains=list(domains),
        include=list(include),
        exclude=list(exclude),
    )


def test_seed_hosts_are_the_default_domains_with_their_subdomains():
    s = scope(seeds=("https://example.com/start", "http://Blog.Other.org:8080/"))
    assert s.domains == ("example.com", "blog.other.org")
    assert s.allows("https://example.com/a")
    assert s.allows("http://www.example.com/b")
    assert s.allows("https://deep.sub.example.com/c")
    assert s.allows("http://blog.other.org/post")
    assert not s.allows("http://other.org/")  # the parent of a seed host is another site
    assert not s.allows("https://badexample.com/")  # a suffix is not a subdomain
    assert not s.allows("https://example.com.evil.net/")


def test_allowed_domains_replace_the_seed_hosts():
    s = scope(seeds=("https://www.example.com/",), domains=("shop.example.net", "", "EXAMPLE.org"))
    assert s.domains == ("shop.example.net", "example.org")
    assert s.allows("https://shop.example.net/cart")
    assert s.allows("https://m.shop.example.net/cart")
    assert s.allows("https://www.example.org/")
    assert not s.allows("https://www.example.com/")


def test_domain_check_ignores_case_ports_and_a_trailing_dot():
    s = scope(domains=("Example.COM",))
    assert s.allows("HTTPS://WWW.EXAMPLE.COM:8443/Path")
    assert s.allows("http://example.com.:80/")
    assert s.allows("http://Sub.Example.com/")


def test_domains_written_loosely_are_understood():
    s = scope(domains=("*.example.com", ".example.net", "https://example.org/path", "x.io:8080"))
    assert s.domains == ("example.com", "example.net", "example.org", "x.io")


def test_idn_domains_compare_in_punycode():
    s = scope(domains=("bücher.example",))
    assert s.domains == ("xn--bcher-kva.example",)
    assert s.allows("http://xn--bcher-kva.example/straße")
    assert s.allows("http://www.BÜCHER.example/")
    punycode_seed = scope(seeds=("http://xn--bcher-kva.example/",))
    assert punycode_seed.allows("http://shop.bücher.example/")


def test_ip_address_seed():
    s = scope(seeds=("http://127.0.0.1:8000/",))
    assert s.allows("http://127.0.0.1:9999/x")
    assert not s.allows("http://127.0.0.2/x")


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/file",
        "mailto:me@example.com",
        "javascript:alert(1)",
        "//example.com/x",
        "/relative",
        "",
        "http://[::1/broken",
        "http://example.com:99999/",
        "not a url",
    ],
)
def test_non_http_and_garbage_urls_are_not_allowed(url):
    assert not scope().allows(url)


def test_include_patterns_must_match_somewhere_in_the_full_url():
    s = scope(include=(r"/products?/", r"[?&]page=\d+"))
    assert s.allows("https://example.com/products/42")
    assert s.allows("https://example.com/list?page=2")
    assert not s.allows("https://example.com/about")
    assert not s.allows("https://elsewhere.com/products/1")  # patterns never widen the domains


def test_exclude_patterns_win_over_includes():
    s = scope(include=(r"/blog/",), exclude=(r"\.pdf$", r"[?&]replytocom="))
    assert s.allows("https://example.com/blog/post")
    assert not s.allows("https://example.com/blog/paper.pdf")
    assert not s.allows("https://example.com/blog/post?replytocom=7")


def test_patterns_search_the_scheme_and_host_too():
    s = scope(exclude=(r"^http://",))
    assert s.allows("https://example.com/")
    assert not s.allows("http://example.com/")


def test_compile_patterns_skips_blank_lines_but_counts_them():
    compiled = compile_patterns(["", r"\d+", "   "], "include_patterns")
    assert [p.pattern for p in compiled] == [r"\d+"]
    # Compiled for RE2 (crawls/engine/patterns.py), not Python's re, which backtracks.
    assert all(isinstance(p, Pattern) for p in compiled)


def test_invalid_regex_message_names_field_line_and_pattern():
    with pytest.raises(ScopeError) as info:
        compile_patterns([r"/ok/", "a("], "include_patterns")
    assert str(info.value) == (
        "include_patterns: line 2: 'a(' is not a valid regular expression: "
        "missing ), unterminated subpattern at position 1"
    )
    assert isinstance(info.value, ValueError)


def test_scope_reports_a_bad_exclude_pattern():
    with pytest.raises(ScopeError, match=r"^exclude_patterns: line 1: '\*\.pdf' is not a valid"):
        scope(exclude=("*.pdf",))


def test_scope_reports_a_bad_domain():
    with pytest.raises(ScopeError, match=r"^allowed_domains: line 2: 'http://' is not a domain"):
        scope(domains=("example.com", "http://"))


def test_scope_reports_a_bad_seed_with_its_line():
    with pytest.raises(ScopeError) as info:
        scope(seeds=("https://example.com/", "ftp://example.com/x"))
    assert str(info.value) == "seeds: line 2: 'ftp://example.com/x' is not an http(s) URL"


@pytest.mark.parametrize(
    ("url", "normal"),
    [
        ("https://example.com", "https://example.com/"),
        ("  http://example.com/a?b=c#d\n", "http://example.com/a?b=c"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000/"),
        ("http://bücher.example/", "http://xn--bcher-kva.example/"),
        ("HTTP://Example.com:80/a/../b", "http://example.com/b"),
    ],
)
def test_validate_url_gives_the_url_stripped_in_the_form_the_client_sends(url, normal):
    assert validate_url(url) == normal


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://example.com/", "is not an http(s) URL"),
        ("example.com", "is not an http(s) URL"),
        ("/path/only", "is not an http(s) URL"),
        ("http://", "has no host"),
        ("http:///path", "has no host"),
        ("https://exa mple.com/", "has a space or a control character"),
        ("https://example.com/a b", "has a space or a control character"),
        ("http://example.com/\x00", "has a space or a control character"),
        ("http://example.com:http/", "has a port that is not a number from 1 to 65535"),
        ("http://[::1/", "has a malformed IPv6 address"),
        ("http://user:secret@example.com/", "has a user name or password before its host"),
        ("javascript:alert(1)", "is not an http(s) URL"),
        ("", "is not an http(s) URL"),
    ],
)
def test_validate_url_rejects_what_cannot_be_fetched_saying_why(url, why):
    with pytest.raises(ValueError) as info:
        validate_url(url, "seeds")
    assert str(info.value) == f"seeds: {url.strip()!r} {why}"


def test_validate_url_rejects_very_long_urls_with_a_short_message():
    url = "https://example.com/" + "a" * 8000
    with pytest.raises(ValueError) as info:
        validate_url(url)
    message = str(info.value)
    assert message.startswith("url: 'https://example.com/aaa") and len(message) < 300
    assert message.endswith("...' is longer than 8000 characters (8020)")
    assert validate_url(url[:8000]) == url[:8000]


def test_url_problem_says_why_a_url_cannot_be_fetched():
    assert url_problem("https://example.com/") == ""
    assert url_problem("ftp://example.com/") == "not an http(s) URL"
    too_long = "https://example.com/" + "a" * 9980
    assert url_problem(too_long) == "longer than 8000 characters (10000)"
    assert url_problem(too_long[:8000]) == ""


@pytest.mark.django_db
def test_every_bad_line_of_a_pattern_field_is_named_at_once():
    """Only the first bad line used to be reported: fix it, save, meet the next."""
    with pytest.raises(ScopeError) as info:
        compile_patterns(["/ok/", "a(", "", "(?<=x)y", "b["], "exclude_patterns")
    assert [problem.split(":")[0] for problem in info.value.problems] == [
        "line 2",
        "line 4",
        "line 5",
    ]
    assert str(info.value).startswith("exclude_patterns: line 2: 'a(' is not a valid")
    with pytest.raises(ValidationError) as caught:
        services.crawl_create(
            user=None, name="x", seeds=["http://a.test/"], include_patterns="a(\n/fine/\nb["
        )
    assert [m.split(":")[0] for m in caught.value.message_dict["include_patterns"]] == [
        "line 1",
        "line 3",
    ]
