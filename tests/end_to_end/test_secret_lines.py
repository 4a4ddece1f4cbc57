"""Malformed lines of secrets (extra headers, cookies, cookies.txt, login fields, basic auth,
proxy lines with passwords) are refused naming the line and the problem, and no error quotes
any of it: a line that did not parse says nothing reliable about which part is the secret
("Authorization Bearer abc" has no colon; "host:port:user:password" is not a proxy URL).

Each bad input carries MARK; it appears in no error, at any door (the form page, the API, the
CLI, the proxy import's report and job page) nor in any log line.
"""

from __future__ import annotations

import io
import json
import logging

import pytest
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command

from crawls import services
from crawls.models import Crawl
from proxies import importer
from proxies import services as proxy_services
from tests.support.clients import bearer, form_data, post
from tests.support.proxy_jobs import import_by_api, import_on_the_page

pytestmark = pytest.mark.django_db

MARK = "Zq7SeCrEtMARK"
SEED = "http://site.test/"
# Credentials' inputs as the API and the CLI take them, each with one thing wrong.
BAD_CREDENTIALS = [
    {"headers": f"Authorization Bearer {MARK}"},
    {"headers": f"Authorization Bearer {MARK}: x"},
    {"headers": f"X-Token {MARK}:"},
    {"headers": f"X-Fine: yes\n{MARK}=1: z"},
    {"headers": f"X-Key: {MARK}\x00"},
    {"headers": f"X-Key: {MARK}\u20ac"},
    {"cookie": f"sid=1; {MARK}"},
    {"cookie": f"sid={MARK}\rx"},
    {"cookies_txt": f".site.test\tTRUE\t/\tFALSE\t{MARK}\tsid\tv"},
    {"cookies_txt": f".site.test\t{MARK}\t/\tFALSE\t0\tsid\tv"},
    {"cookies_txt": f".site.test\tTRUE\t/\t{MARK}\t0\tsid\tv"},
    {"cookies_txt": f".site.test\tTRUE\t/\tFALSE\t0\tsid={MARK}\tv"},
    {"cookies_txt": f"{MARK}\u00e9 .x\tTRUE\t/\tFALSE\t0\tsid\tv"},
    {"cookies_txt": f".site.test\tTRUE\t/\tFALSE\t\u00b2\t{MARK}:\tv"},
    {"cookies_txt": f"sid\t{MARK}"},
    {"cookies_txt": f".site.test\tTRUE\t/\tFALSE\t0\tsid\t{MARK}\u20ac"},
    {"login_url": SEED + "login", "login_fields": f"user=alice\npassword {MARK}"},
    {"login_fields": f"password={MARK}"},
    {"basic_user": "alice", "basic_password": f"{MARK}\rx"},
    {"basic_password": MARK},
]
BAD_PROXY_LINES = [
    f"http://user:{MARK}",  # no host: the password read as a port
    f"1.2.3.4:8080:user:{MARK}",  # a seller's format, not a URL
    f"http://{MARK}@1.2.3.4:8080",  # a token as the user name, no password
    f"http://user:pass@1.2.3.4:8080/{MARK}",
    f"http://user:pass@1.2.3.4:8080?key={MARK}",
    f"socks5://user:{MARK}@bad_host:1080",
    f"ftp://user:{MARK}@1.2.3.4:21",
    f"user:{MARK}@1.2.3.4:80",
    f"http://user:{MARK}@[::1",
    f"http://user:{MARK}@1.2.3.4:99999",
    f"http://user:{MARK}%00@1.2.3.4:80",
    f"socks5://user:{MARK * 20}@1.2.3.4:1080",
    f"http://user:{MARK}@h\u00f6st.example:80",
    f"http://1.2.3.4:{MARK}",
    f"{MARK}:{MARK}",
]


@pytest.fixture
def logs(caplog) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog


def assert_unmarked(*texts: str) -> None:
    for text in texts:
        assert MARK.lower() not in text.lower(), text[:3000]


@pytest.mark.parametrize("auth", BAD_CREDENTIALS, ids=lambda auth: repr(auth)[:60])
def test_bad_credentials_are_refused_without_a_fragment_of_them(
    user, user_client, logs, auth, tmp_path
):
    with pytest.raises(ValidationError) as refused:
        services.crawl_create(user=user, name="x", seeds=[SEED], auth=auth)
    assert_unmarked(json.dumps(refused.value.message_dict))

    api = post(user_client, "/api/crawls/", {"name": "x", "seeds": [SEED], "auth": auth})
    assert api.status_code == 400, api.content[:300]
    assert_unmarked(api.content.decode())

    fields = {k: v for k, v in auth.items() if k != "cookies_txt"}
    if "cookies_txt" in auth:
        fields["cookies_txt"] = SimpleUploadedFile("cookies.txt", auth["cookies_txt"].encode())
    data = form_data(user_client, "/crawls/new/", name="x", seeds=SEED, **fields)
    page = user_client.post("/crawls/new/", data)
    assert page.status_code == 200 and page.context["form"].errors
    assert_unmarked(page.content.decode())

    path = tmp_path / "auth.json"
    path.write_text(json.dumps({k: v for k, v in auth.items() if k != "cookies_txt"}))
    args = ["crawl", "create", "--name", "x", "--seed", SEED, "--auth-file", str(path)]
    if "cookies_txt" in auth:
        (tmp_path / "cookies.txt").write_text(auth["cookies_txt"])
        args += ["--cookies-file", str(tmp_path / "cookies.txt")]
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError) as cli:
        call_command(*args, stdout=out, stderr=err)
    assert_unmarked(str(cli.value), out.getvalue(), err.getvalue())
    assert not Crawl.objects.exists()
    assert_unmarked(logs.text)


def test_a_header_line_without_a_colon_is_named_by_its_number_only(user):
    with pytest.raises(ValidationError) as refused:
        auth = {"headers": f"X-Fine: 1\n\nAuthorization Bearer {MARK}"}
        services.crawl_create(user=user, name="x", seeds=[SEED], auth=auth)
    assert refused.value.message_dict == {
        "headers": ["line 3: not a header; write 'Name: value' (found no colon)"]
    }


def test_bad_proxy_lines_are_reported_by_number_without_a_fragment_of_their_secrets(
    staff, staff_client, logs, tmp_path
):
    text = "\n".join(["1.2.3.4:3128", *BAD_PROXY_LINES])
    report = proxy_services.import_proxies(text=text, source="paste", user=staff)
    report_lines = list(range(2, len(BAD_PROXY_LINES) + 2))
    assert [e.line for e in report.errors] == report_lines
    assert len(report.added) == 1
    assert_unmarked(json.dumps(report.as_dict()))

    page = import_on_the_page(staff_client, {"text": text.replace("1.2.3.4", "1.2.3.5", 1)})
    assert page.status_code == 200 and b"Bad lines" in page.content
    assert_unmarked(page.content.decode())

    answer, status = import_by_api(staff_client, {"text": text}, **bearer(staff))
    assert len(status.json()["report"]["errors"]) == len(BAD_PROXY_LINES)
    assert_unmarked(answer.content.decode(), status.content.decode())

    path = tmp_path / "list.txt"
    path.write_text(text)
    out, err = io.StringIO(), io.StringIO()
    call_command("proxies", "import", str(path), stdout=out, stderr=err)
    bad = [line for line in err.getvalue().splitlines() if "duplicate" not in line]
    assert [line.split(":")[0] for line in bad] == [f"line {n}" for n in report_lines]
    assert_unmarked(out.getvalue(), err.getvalue())
    assert_unmarked(logs.text)


def test_a_bad_proxy_line_shows_only_what_cannot_be_a_secret():
    shown = {
        line: (error.text, error.reason)
        for line, error in zip(
            BAD_PROXY_LINES,
            importer.parse("\n".join(BAD_PROXY_LINES)).errors,
            strict=True,
        )
    }
    assert shown[f"http://user:{MARK}"] == (
        "http://****:****",
        "port must be a number from 1 to 65535",
    )
    assert shown[f"1.2.3.4:8080:user:{MARK}"] == (
        "1.2.3.4:****",
        "looks like host:port:user:password; write it as http://user:password@host:port",
    )
    assert shown[f"http://{MARK}@1.2.3.4:8080"] == (
        "http://****@1.2.3.4:8080",
        "credentials must be user:password",
    )
    assert shown[f"http://user:pass@1.2.3.4:8080/{MARK}"] == (
        "http://user:****@1.2.3.4:8080/****",
        "unexpected path after host:port",
    )
    assert shown[f"socks5://user:{MARK}@bad_host:1080"] == (
        "socks5://user:****@****:1080",
        "invalid host: not an IP address or a host name (letters a-z, digits, - and .)",
    )
