"""Importing proxy lists: paste, file upload, URL and CLI; every bad line and duplicate reported."""

from __future__ import annotations

import io

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from hypothesis import given
from hypothesis import strategies as st

from proxies import importer, services
from proxies.importer import parse
from proxies.models import Proxy, ProxyEvent, ProxyJob, ProxyState
from tests.support.fuzzing import PROPERTY
from tests.support.proxy_jobs import import_by_api, import_on_the_page
from tests.support.sites import Response

pytestmark = pytest.mark.django_db

GOOD = """# a comment, then a blank line

1.2.3.4:8080
http://proxy.example:3128
https://user:p%40ss@secure.example:443
http://[2001:db8::1]:8080
"""


NOT_A_HOST = "invalid host: not an IP address or a host name (letters a-z, digits, - and .)"


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (
            "socks4://1.2.3.4:1080",
            "unsupported scheme 'socks4' (use http, https, socks5 or socks5h)",
        ),
        (
            "socks5://u:" + "p" * 256 + "@h.example:1080",
            "a SOCKS5 user name or password is at most 255 bytes",
        ),
        ("1.2.3.4", "missing port"),
        ("1.2.3.4:0", "port must be a number from 1 to 65535"),
        ("1.2.3.4:99999", "port must be a number from 1 to 65535"),
        ("1.2.3.4:abc", "port must be a number from 1 to 65535"),
        ("bad_host!:80", NOT_A_HOST),
        ("999.1.1.1:80", NOT_A_HOST),
        ("http://:80", "missing host"),
        ("http://user@h.example:80", "credentials must be user:password"),
        ("http://:pw@h.example:80", "credentials must be user:password"),
        ("user:pw@h.example:80", "credentials need a scheme: scheme://user:pass@host:port"),
        ("http://h.example:80/path", "unexpected path after host:port"),
        ("http://u%00:pw@h.example:80", "credentials must not have control characters"),
        ("http://u:p%00w@h.example:80", "credentials must not have control characters"),
        ("http://u:p\x7fw@h.example:80", "credentials must not have control characters"),
        ("[fe80::1%\x00]:80", "invalid host: it has a control character"),
        (
            "http://[fe80::1%e\u202eth0]:80",
            "invalid host: a name with letters outside a-z is written in punycode (xn--...)",
        ),
        (
            "1.2.3.4:8080:user:pw",
            "looks like host:port:user:password; write it as http://user:password@host:port",
        ),
    ],
)
def test_every_bad_line_is_reported_with_its_number_and_reason(line, reason):
    result = parse("1.1.1.1:80\n\n" + line)
    assert result.proxies[0].host == "1.1.1.1"
    [error] = result.errors
    assert (error.line, error.reason) == (3, reason)


lines = st.one_of(
    st.text(max_size=40),
    st.builds(
        "{}{}{}{}{}".format,
        st.sampled_from(["", "http://", "https://", "HTTP://", "socks5://", "://"]),
        st.sampled_from(["", "user:pw@", "u%00:p@", "u:p%00@", "u:%ff@", "@", ":@", "u:p@x@"]),
        st.one_of(
            st.sampled_from(["h.example", "1.2.3.4", "[::1]", "[fe80::1%eth0]", "xn--bcher-kva.x"]),
            st.text(max_size=20),
            st.from_regex(r"\[[0-9a-f:%.]{0,20}.?\]", fullmatch=True),
        ),
        st.one_of(st.just(""), st.integers(-1, 10**6).map(":{}".format), st.text(max_size=6)),
        st.sampled_from(["", "/", "/x", "?q", "#f", " ", "\x00"]),
    ),
)


@pytest.mark.slow
@PROPERTY
@given(st.lists(lines, max_size=6).map("\n".join))
def test_any_text_gives_proxies_and_numbered_line_errors_never_an_exception(text):
    result = parse(text)
    numbers = [p.line for p in result.proxies] + [e.line for e in result.errors]
    assert all(1 <= n <= len(text.splitlines()) for n in numbers)
    for proxy in result.proxies:
        assert proxy.scheme in importer.SCHEMES and 1 <= proxy.port <= 65535
        # What is stored can be stored on PostgreSQL and sent in a request line.
        assert proxy.host.isascii() and proxy.host.isprintable()
        assert (proxy.username + proxy.password).isprintable()


def test_a_pasted_list_over_5_mb_is_refused_whole(staff_client):
    text = "# a comment line of forty bytes or so...\n" * 130_000  # 5.3 MB, under the body limit
    with pytest.raises(services.ImportFailed, match="^the list is larger than 5 MB$"):
        services.import_proxies(text=text, source="paste")
    page = staff_client.post("/proxies/import", {"text": text})
    assert page.status_code == 200
    assert page.context["form"].non_field_errors() == ["the list is larger than 5 MB"]
    assert Proxy.objects.count() == 0


def test_a_bad_line_never_echoes_a_password():
    [error] = parse("ftp://user:hunter2@h.example:21").errors
    assert "hunter2" not in error.text and error.text == "ftp://user:****@h.example:21"


def test_a_pasted_list_adds_every_good_line():
    report = services.import_proxies(text=GOOD, source="paste")
    assert report.errors == [] and report.duplicates == []
    assert sorted(p.key for p in report.added) == [
        "http://1.2.3.4:8080",
        "http://[2001:db8::1]:8080",
        "http://proxy.example:3128",
        "https://secure.example:443",
    ]
    secure = Proxy.objects.get(host="secure.example")
    assert (secure.username, secure.password) == ("user", "p@ss")
    assert secure.url == "https://user:p%40ss@secure.example:443"
    assert secure.masked_url == "https://user:****@secure.example:443"
    assert all(p.state == ProxyState.NEW and p.source == "paste" for p in Proxy.objects.all())
    assert ProxyEvent.objects.filter(kind="imported").count() == 4


def test_duplicates_are_reported_not_added_twice():
    services.import_proxies(text="1.2.3.4:8080", source="first")
    report = services.import_proxies(
        text="1.2.3.4:8080\nhttp://5.6.7.8:80\n5.6.7.8:80\nHTTP://5.6.7.8:80", source="second"
    )
    assert [p.key for p in report.added] == ["http://5.6.7.8:80"]
    assert [(d.line, d.why) for d in report.duplicates] == [
        (3, "repeats line 2"),
        (4, "repeats line 2"),
        (1, "already in the inventory (new (not yet validated))"),
    ]
    assert Proxy.objects.count() == 2


def test_a_removed_proxy_is_a_duplicate_too(staff):
    [proxy] = services.import_proxies(text="1.2.3.4:8080", source="x").added
    services.remove_proxies(proxies=[proxy], why="dead", user=staff)
    report = services.import_proxies(text="1.2.3.4:8080", source="x")
    assert report.added == [] and report.duplicates[0].why == "already in the inventory (removed)"


def test_a_list_is_fetched_from_a_url(make_site):
    site = make_site(lambda r: Response(body="1.2.3.4:80\nnope\n", content_type="text/plain"))
    report = services.import_from_url(url=site.url + "/list.txt")
    assert [p.key for p in report.added] == ["http://1.2.3.4:80"]
    assert [(e.line, e.reason) for e in report.errors] == [(2, "missing port")]
    assert report.added[0].source == site.url + "/list.txt"


def test_a_url_that_is_not_a_text_list_is_refused(make_site):
    html = make_site(lambda r: Response(body=b"\x89PNG", content_type="image/png"))
    with pytest.raises(services.ImportFailed, match="expected a plain-text list"):
        services.import_from_url(url=html.url)
    missing = make_site(lambda r: Response(status=404))
    with pytest.raises(services.ImportFailed, match="could not fetch"):
        services.import_from_url(url=missing.url)
    with pytest.raises(services.ImportFailed, match="must start with"):
        services.import_from_url(url="file:///etc/passwd")


def test_the_page_imports_a_paste_and_shows_each_error(staff_client):
    page = import_on_the_page(staff_client, {"text": "1.2.3.4:80\n1.2.3.4:80\nx:y"})
    assert page.status_code == 200
    body = page.content.decode()
    assert "1 added" in body and "1 duplicates" in body and "1 bad lines" in body
    assert "repeats line 1" in body and "port must be a number" in body


def test_the_page_imports_an_uploaded_file(staff, staff_client):
    upload = SimpleUploadedFile("list.txt", b"https://u:secret@h.example:443\n", "text/plain")
    page = import_on_the_page(staff_client, {"file": upload})
    assert "1 added" in page.content.decode()
    proxy = Proxy.objects.get()
    assert (proxy.source, proxy.added_by) == ("upload: list.txt", staff)
    assert "secret" not in page.content.decode()
    assert "secret" not in staff_client.get("/proxies/").content.decode()
    assert "secret" not in staff_client.get(f"/proxies/{proxy.pk}/").content.decode()


def test_the_page_wants_exactly_one_kind_of_list(staff_client):
    page = staff_client.post("/proxies/import", {})
    assert "Give exactly one" in page.content.decode()


def test_the_cli_imports_a_file_and_reports_bad_lines(tmp_path):
    path = tmp_path / "list.txt"
    path.write_text("1.2.3.4:80\nbad line\n1.2.3.4:80\n")
    out, err = io.StringIO(), io.StringIO()
    call_command("proxies", "import", str(path), stdout=out, stderr=err)
    assert "1 added, 1 duplicates, 1 bad lines" in out.getvalue()
    assert f"line 2: {NOT_A_HOST}: ****" in err.getvalue()
    assert "line 3: duplicate, repeats line 1" in err.getvalue()
    assert Proxy.objects.get().source == "file: list.txt"


def test_the_cli_imports_from_a_url(make_site):
    site = make_site(lambda r: Response(body="9.9.9.9:3128\n", content_type="text/plain"))
    out = io.StringIO()
    call_command("proxies", "import", site.url, stdout=out)
    assert "1 added" in out.getvalue()


def test_the_cli_says_when_a_file_cannot_be_read(tmp_path):
    with pytest.raises(CommandError, match="cannot read"):
        call_command("proxies", "import", str(tmp_path / "missing.txt"))


def test_a_pasted_list_starting_with_a_byte_order_mark_parses_its_first_line():
    from proxies.importer import parse

    result = parse("\ufeff127.0.0.1:3128\r\nhttp://127.0.0.2:8080\r\n")
    assert result.errors == []
    assert len(result.proxies) == 2


# --- Secrets never come back in a report ------------------------------------------------------

# Every password of SECRET_LIST; several hold '@', which once ended the mask early.
SECRETS = ["Hunter2zq", "p@ssW0rd9", "s0cks@Zqw8v", "dUp@Xy7kq", "tw0@at@signs"]
SECRET_LIST = """https://u:Hunter2zq@a.example:443
https://u:Hunter2zq@a.example:443
http://u:p@ssW0rd9@h.example:99999
socks5://u:s0cks@Zqw8v@s.example:1080
http://u:dUp@Xy7kq@d.example:80
http://u:dUp@Xy7kq@d.example:80
http://u:tw0@at@signs@t.example:80/path
user:Hunter2zq@n.example:80
"""


def assert_no_secret(text: str, where: str) -> None:
    for secret in SECRETS:
        for part in [secret, *secret.split("@")]:
            if len(part) >= 5:
                assert part not in text, f"{where} shows {part!r} (of password {secret!r})"


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        ("http://u:p@ssw0rd@h.example:99999", "http://u:****@h.example:99999"),
        ("http://u:a@b@c@h.example:0", "http://u:****@h.example:0"),
        ("http://u:pa/ss@h.example:80/x", "http://u:****@h.example:80/****"),
        ("http://u:pass word@h.example:x", "http://u:****@h.example:****"),
        ("u:p@ss@h.example:80", "u:****@h.example:80"),
        # What may be a secret in a line that did not parse: a user name without a password
        # (an API token), a path or a query, what stands where a host or a port should.
        ("http://T0kenZq@h.example:80/x", "http://****@h.example:80/****"),
        ("http://h.example:80/?key=T0kenZq", "http://h.example:80/****"),
        ("http://u:T0kenZq", "http://****:****"),
        ("1.2.3.4:8080:u:T0kenZq", "1.2.3.4:****"),
        ("socks5://u:T0kenZq@bad_host:1080", "socks5://u:****@****:1080"),
    ],
)
def test_a_bad_line_is_masked_up_to_its_last_at_sign(line, shown):
    [error] = parse(line).errors
    assert error.text == shown


def test_a_repeated_line_is_reported_with_its_password_masked():
    result = parse("http://u:dUp@Xy7kq@d.example:80\nhttp://u:dUp@Xy7kq@d.example:80\n")
    assert result.repeats == [(2, "http://u:****@d.example:80", 1)]
    report = services.import_proxies(text=SECRET_LIST, source="paste")
    assert [(d.line, d.text, d.why) for d in report.duplicates] == [
        (2, "https://u:****@a.example:443", "repeats line 1"),
        (6, "http://u:****@d.example:80", "repeats line 5"),
    ]
    assert_no_secret(str(report.as_dict()), "the import report")


def test_no_password_appears_on_the_import_page(staff_client):
    page = import_on_the_page(staff_client, {"text": SECRET_LIST}).content.decode()
    assert "3 added" in page and "2 duplicates" in page and "3 bad lines" in page
    assert "http://u:****@h.example:99999" in page and "repeats line 5" in page
    assert_no_secret(page, "the import page")
    again = import_on_the_page(staff_client, {"text": SECRET_LIST}).content.decode()
    assert "0 added" in again and "already in the inventory" in again
    assert_no_secret(again, "the import page, importing the list again")
    for job in ProxyJob.objects.all():
        status = staff_client.get(f"/proxies/jobs/{job.pk}.json?report=1").content.decode()
        assert "repeats line 5" in status
        assert_no_secret(status, "the import's JSON report")
        assert job.text == "" and job.url == "", "an ended job keeps no list (nor its passwords)"


def test_no_password_appears_in_the_cli_report(tmp_path):
    path = tmp_path / "list.txt"
    path.write_text(SECRET_LIST)
    for attempt in ("first", "again"):
        out, err = io.StringIO(), io.StringIO()
        call_command("proxies", "import", str(path), stdout=out, stderr=err)
        assert "line 3: port must be a number from 1 to 65535: http://u:****@h.example:99999" in (
            err.getvalue()
        )
        assert "line 6: duplicate, repeats line 5: http://u:****@d.example:80" in err.getvalue()
        assert_no_secret(out.getvalue() + err.getvalue(), f"the CLI report ({attempt})")


def test_a_bad_list_url_is_refused_without_its_password():
    for url, why in (
        ("http://user:s3cret@h.example:99999/x", "has a port that is not a number from 1 to"),
        ("http://user:s3cret@h.example/a b", "has a space or a control character"),
    ):
        with pytest.raises(CommandError) as refused:
            call_command("proxies", "import", url)
        assert "could not fetch http://user:****@h.example" in str(refused.value)
        assert why in str(refused.value)
        assert "s3cret" not in str(refused.value)


def test_no_password_appears_in_the_api_report(client, staff):
    from tests.support.clients import bearer

    auth = bearer(staff)
    for attempt in ("first", "again"):
        answer, response = import_by_api(client, {"text": SECRET_LIST}, **auth)
        assert response.status_code == 200, response.content
        assert_no_secret(answer.content.decode(), f"the API's answer ({attempt})")
        report = response.json()["report"]
        assert len(report["errors"]) == 3 and {d["line"] for d in report["duplicates"]} >= {2, 6}
        assert_no_secret(response.content.decode(), f"the API report ({attempt})")
    listed = client.get("/api/proxies/", **auth)
    assert "https://u:****@a.example:443" in listed.content.decode()
    assert_no_secret(listed.content.decode(), "the API proxy list")


def test_a_password_in_the_list_url_is_masked_in_the_source_and_errors(make_site):
    site = make_site(lambda r: Response(body="1.2.3.4:80\n", content_type="text/plain"))
    url = site.url.replace("http://", "http://reader:Hunter2zq@") + "/list.txt"
    [proxy] = services.import_from_url(url=url).added
    assert proxy.source == site.url.replace("http://", "http://reader:****@") + "/list.txt"
    assert site.log[-1].headers["Authorization"].startswith("Basic ")  # the password was used
    gone = make_site(lambda r: Response(status=404))
    with pytest.raises(services.ImportFailed) as caught:
        services.import_from_url(url=gone.url.replace("http://", "http://r:Hunter2zq@"))
    assert (
        str(caught.value)
        == f"could not fetch {gone.url.replace('http://', 'http://r:****@')}: HTTP 404"
    )


# --- Fetching a list from a URL ---------------------------------------------------------------


def test_the_private_network_guard_refuses_a_list_on_loopback(make_site, settings):
    settings.CRAWLHUB_BLOCK_PRIVATE_NETWORKS = True
    site = make_site(lambda r: Response(body="1.2.3.4:80\n", content_type="text/plain"))
    with pytest.raises(services.ImportFailed) as caught:
        services.import_from_url(url=site.url + "/list.txt")
    assert str(caught.value) == (
        f"refused to fetch {site.url}/list.txt: 127.0.0.1 is a loopback address "
        "(CRAWLHUB_BLOCK_PRIVATE_NETWORKS)"
    )
    named = site.url.replace("127.0.0.1", "localhost")
    with pytest.raises(services.ImportFailed, match=r"localhost resolves to (127\.0\.0\.1|::1)"):
        services.import_from_url(url=named)
    assert site.log == [] and not Proxy.objects.exists()


def test_the_guard_refusal_is_reported_on_the_page_the_cli_and_the_api(
    make_site, settings, staff_client, client, staff
):
    from tests.support.clients import bearer, post

    settings.CRAWLHUB_BLOCK_PRIVATE_NETWORKS = True
    site = make_site(lambda r: Response(body="1.2.3.4:80\n", content_type="text/plain"))
    url = site.url + "/list.txt"
    why = f"refused to fetch {url}: 127.0.0.1 is a loopback address"
    page = staff_client.post("/proxies/import", {"url": url})
    assert page.status_code == 200 and why in page.content.decode()
    with pytest.raises(CommandError, match=why):
        call_command("proxies", "import", url)
    api = post(client, "/api/proxies/import/", {"url": url}, **bearer(staff))
    assert api.status_code == 400 and why in api.json()["url"][0]
    assert site.log == [] and not Proxy.objects.exists()


def test_a_list_behind_a_redirect_is_followed_a_few_hops_only(make_site):
    def handler(request):
        if request.path == "/list.txt":
            return Response(body="1.2.3.4:80\n", content_type="text/plain; charset=utf-8")
        if request.path == "/loop":
            return Response(status=302, headers={"Location": "/loop"})
        return Response(status=301, headers={"Location": "/list.txt"})

    site = make_site(handler)
    assert [p.key for p in services.import_from_url(url=site.url + "/old").added] == [
        "http://1.2.3.4:80"
    ]
    with pytest.raises(services.ImportFailed, match="could not fetch .*too many redirects"):
        services.import_from_url(url=site.url + "/loop")
    assert len([r for r in site.log if r.path == "/loop"]) == services.MAX_REDIRECTS + 1


def test_a_list_larger_than_the_cap_is_refused(make_site):
    big = ("1.2.3.4:80\n" * (services.MAX_LIST_BYTES // 11 + 2)).encode()
    site = make_site(lambda r: Response(body=big, content_type="text/plain"))
    with pytest.raises(services.ImportFailed, match=r"the list at .* is larger than 5 MB"):
        services.import_from_url(url=site.url)
    assert not Proxy.objects.exists()
