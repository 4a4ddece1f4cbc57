"""The URL checks every door and the fetcher share (crawlhub/http/urls.py), on any text: an
answer, never an exception other than validate_url's ValueError. (Examples: tests/engine/
test_scope.py.)"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from crawlhub.http.urls import (
    MAX_URL_LENGTH,
    ascii_host,
    is_http_url,
    url_origin,
    url_problem,
    validate_url,
)
from tests.support.fuzzing import PROPERTY

hosts = st.one_of(
    st.sampled_from(["example.com", "127.0.0.1", "[::1]", "[fe80::1%eth0]", "bücher.test", ""]),
    st.text(max_size=20),
    st.from_regex(r"\[[0-9a-fA-F:.%]{0,16}\]?", fullmatch=True),
)
urls = st.one_of(
    st.text(max_size=60),
    st.builds(
        "{}{}{}{}{}".format,
        st.sampled_from(["http://", "https://", "HTTP://", "ftp://", "//", "http:/", ""]),
        st.sampled_from(["", "user:pw@", "@", "a@b@"]),
        hosts,
        st.one_of(st.just(""), st.integers(-5, 10**20).map(":{}".format), st.text(max_size=5)),
        st.one_of(st.just("/"), st.text(max_size=20), st.just("/" + "a" * MAX_URL_LENGTH)),
    ),
)


@PROPERTY
@given(urls)
def test_any_text_is_a_fetchable_url_or_a_reason_why_not(url):
    fetchable = is_http_url(url)
    assert (url_problem(url) == "") == fetchable
    assert url.startswith(url_origin(url))
    try:
        cleaned = validate_url(url, field="line 1")
    except ValueError as refused:
        assert str(refused).startswith("line 1: ") and len(str(refused)) < 300
        assert not fetchable
    else:
        assert cleaned == url.strip() and is_http_url(cleaned)


@PROPERTY
@given(hosts)
def test_any_host_is_an_ascii_name_or_none(host):
    name = ascii_host(host)
    assert name is None or (name.isascii() and name == name.lower())
