"""CRAWLHUB_BLOCK_PRIVATE_NETWORKS: crawls refuse hosts on private networks, at every hop.

The local sites of the suite live on 127.0.0.1, which the guard refuses: a test that needs a
site to play a public one lets exactly that site's first URL through and leaves every other
check to crawlhub.http.netguard.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from crawlhub.http import netguard
from crawlhub.http.client import Fetcher, refusal
from crawls import services, webhooks
from crawls.models import CrawlState, Webhook, WebhookDelivery
from tests.support.clients import form_data
from tests.support.connects import hosts, record_connects
from tests.support.crawling import drive
from tests.support.sites import Response, pages_site

ROOT = Path(__file__).resolve().parents[2]
SETTING = "(CRAWLHUB_BLOCK_PRIVATE_NETWORKS)"

pytestmark = pytest.mark.usefixtures("quick_slices")


@pytest.fixture
def guard_on(settings):
    settings.CRAWLHUB_BLOCK_PRIVATE_NETWORKS = True
    return settings


def blocked(host: str) -> str:
    with pytest.raises(netguard.BlockedAddress) as caught:
        netguard.check_host(host)
    return str(caught.value)


@pytest.fixture
def site_allowed(guard_on):
    """site_allowed(site_url): the real guard, on, with the address and port of `site_url`
    let through (CRAWLHUB_PRIVATE_NETWORKS_ALLOWED), so that it plays a public site; every
    other address on loopback stays private, other ports of 127.0.0.1 included."""

    def allow(site_url: str) -> None:
        guard_on.CRAWLHUB_PRIVATE_NETWORKS_ALLOWED = [site_url.partition("://")[2]]

    return allow


# -- what counts as private ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("10.0.0.5", "private"),
        ("172.16.3.4", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("224.0.0.251", "multicast"),
        ("240.0.0.1", "reserved"),
        ("0.0.0.0", "unspecified"),
        ("::1", "loopback"),
        ("[::1]", "loopback"),
        ("::", "unspecified"),
        ("fe80::1", "link-local"),
        ("fd12:3456::1", "private"),
        ("ff02::1", "multicast"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:10.0.0.5", "private"),
        ("[::ffff:a00:5]", "private"),
        ("64:ff9b::a9fe:a9fe", "link-local"),
    ],
)
def test_private_addresses_are_blocked_with_their_kind(host, kind):
    address = ipaddress.ip_address(host.strip("[]"))
    article = "an" if kind[0] in "aeiou" else "a"
    assert blocked(host) == f"{address} is {article} {kind} address {SETTING}"


@pytest.mark.parametrize("host", ["8.8.8.8", "93.184.216.34", "2606:4700:4700::1111"])
def test_public_addresses_pass(host):
    assert netguard.check_host(host) is None


def test_the_message_for_the_issue_example():
    assert blocked("10.0.0.5") == f"10.0.0.5 is a private address {SETTING}"


@pytest.mark.parametrize("host", ["localhost", "127.1", "2130706433", "0x7f000001", "0177.0.0.1"])
def test_names_and_odd_ipv4_forms_are_resolved_before_the_check(host):
    assert blocked(host) == f"{host} resolves to 127.0.0.1, a loopback address {SETTING}"


def test_a_name_that_does_not_resolve_is_left_to_the_fetch():
    assert netguard.check_host("nosuch.invalid") is None


def test_check_url_reads_the_host_of_a_url():
    assert netguard.check_url("http://8.8.8.8/x") is None
    with pytest.raises(netguard.BlockedAddress, match="::1 is a loopback"):
        netguard.check_url("https://[::1]:8443/admin")
    assert netguard.check_url("http://[::1/") is None  # malformed: the fetch says so


# -- the fetcher: first URL and every redirect hop -------------------------------------------


def test_fetcher_refuses_a_loopback_url_without_connecting(make_site, guard_on):
    site = make_site(pages_site({"/": "<p>secret</p>"}))
    with Fetcher(timeout=10, max_bytes=10_000) as f:
        result = f.fetch(site.url + "/")
    assert result.error == f"blocked: 127.0.0.1 is a loopback address {SETTING}"
    assert result.error_kind == "blocked" and not result.retryable
    assert result.status is None and result.body == b""
    assert site.log == []


def test_a_redirect_to_a_private_address_is_not_followed(make_site, site_allowed):
    site = make_site(
        pages_site({"/": Response(status=302, headers={"Location": "http://10.255.255.1/"})})
    )
    site_allowed(site.url)
    with Fetcher(timeout=5, max_bytes=10_000) as f, record_connects() as connects:
        result = f.fetch(site.url + "/")
    assert hosts(connects) == {"127.0.0.1"}  # the site, never 10.255.255.1
    assert result.error == f"blocked: 10.255.255.1 is a private address {SETTING}"
    assert result.error_kind == "blocked" and not result.retryable
    assert result.redirects == ["http://10.255.255.1/"] and result.status == 302
    assert site.paths() == ["/"]


@pytest.mark.parametrize(
    ("target", "kind"),
    [
        ("http://[::1]:{port}/secret", "::1 is a loopback"),
        ("http://[::ffff:127.0.0.1]:{port}/secret", "::ffff:7f00:1 is a loopback"),
        ("http://localhost:{port}/secret", "localhost resolves to"),
        ("http://2130706433:{port}/secret", "127.0.0.1 is a loopback"),  # read as 127.0.0.1
    ],
)
def test_redirects_to_loopback_in_any_spelling_never_reach_it(
    make_site, site_allowed, target, kind
):
    inner = make_site(pages_site({"/secret": "<title>internal</title>"}))
    location = target.format(port=inner.port)
    outer = make_site(pages_site({"/": Response(status=301, headers={"Location": location})}))
    site_allowed(outer.url)
    with Fetcher(timeout=10, max_bytes=10_000) as f:
        result = f.fetch(outer.url + "/")
    assert result.error.startswith(f"blocked: {kind}") and result.error_kind == "blocked"
    assert inner.log == []


def test_without_a_guard_the_same_redirect_is_followed(make_site, settings):
    settings.CRAWLHUB_BLOCK_PRIVATE_NETWORKS = False
    inner = make_site(pages_site({"/secret": "<title>internal</title>"}))
    location = f"http://[::ffff:127.0.0.1]:{inner.port}/secret"
    outer = make_site(pages_site({"/": Response(status=301, headers={"Location": location})}))
    with Fetcher(timeout=10, max_bytes=10_000) as f:
        result = f.fetch(outer.url + "/")
    assert result.status == 200 and result.title == "internal"
    assert inner.paths() == ["/secret"]


def test_a_post_to_a_private_address_is_refused_without_connecting(make_site, guard_on):
    site = make_site(pages_site({"/hook": "ok"}))
    with Fetcher(timeout=10, max_bytes=1000) as f:
        result = f.post(site.url + "/hook", body=b"{}", headers={})
    assert result.error == f"blocked: 127.0.0.1 is a loopback address {SETTING}"
    assert result.error_kind == "blocked" and result.status is None
    assert site.log == []


def test_the_operators_own_url_passes_the_guard_but_its_redirects_do_not(make_site, guard_on):
    inner = make_site(pages_site({"/secret": "<title>internal</title>"}))
    location = f"http://localhost:{inner.port}/secret"
    own = make_site(
        pages_site(
            {
                "/echo": '{"origin": "x"}',
                "/moved": Response(status=302, headers={"Location": location}),
            }
        )
    )
    with Fetcher(timeout=10, max_bytes=10_000) as f:
        assert f.get(own.url + "/echo").error_kind == "blocked"  # any other caller: refused
        answer = f.get(own.url + "/echo", operator_url=True)
        moved = f.get(own.url + "/moved", operator_url=True)
    assert (answer.status, answer.error) == (200, "") and answer.json() == {"origin": "x"}
    assert moved.error.startswith("blocked: localhost resolves to") and moved.status == 302
    assert own.paths() == ["/echo", "/moved"] and inner.log == []


def test_refusal_tells_callers_ahead_of_a_fetch_only_with_the_setting_on(settings):
    settings.CRAWLHUB_BLOCK_PRIVATE_NETWORKS = False
    assert refusal("http://127.0.0.1/") == ""
    settings.CRAWLHUB_BLOCK_PRIVATE_NETWORKS = True
    assert refusal("http://127.0.0.1/") == f"blocked: 127.0.0.1 is a loopback address {SETTING}"
    assert refusal("http://8.8.8.8/") == ""


# -- crawls ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_crawl_of_loopback_is_refused_page_by_page_with_the_setting_on(user, make_site, settings):
    site = make_site(pages_site({"/": '<a href="/a">a</a>', "/a": "a"}))
    crawl = services.crawl_create(user=user, name="t", seeds=[site.url + "/"], threads=2)
    settings.CRAWLHUB_BLOCK_PRIVATE_NETWORKS = True  # turned on after the crawl was made
    services.crawl_start(crawl=crawl, user=user)
    crawl = drive(crawl, timeout=30)
    # Not one page could be fetched: the crawl ends failed, saying why.
    assert crawl.state == CrawlState.FAILED
    assert crawl.error == (
        f"no page could be fetched: blocked: 127.0.0.1 is a loopback address {SETTING} (1x)"
    )
    page = crawl.pages.get()
    assert page.error == f"blocked: 127.0.0.1 is a loopback address {SETTING}"
    assert page.status is None
    assert crawl.failures.count() == 0  # refused for good, not retried
    assert site.log == []  # not even robots.txt was asked for


@pytest.mark.django_db
def test_a_crawl_s_redirect_to_a_private_address_is_a_page_refused_without_connecting(
    user, make_site, site_allowed
):
    target = "http://10.255.255.1/"
    site = make_site(
        pages_site(
            {
                "/": '<a href="/old">old</a>',
                "/old": Response(status=302, headers={"Location": target}),
            }
        )
    )
    site_allowed(site.url)
    crawl = services.crawl_create(
        user=user,
        name="t",
        seeds=[site.url + "/"],
        obey_robots=False,
        timeout=5,
        allowed_domains=["127.0.0.1", "10.255.255.1"],
    )
    services.crawl_start(crawl=crawl, user=user)
    with record_connects() as connects:
        crawl = drive(crawl, timeout=30)
    assert "10.255.255.1" not in hosts(connects)
    # The redirect is followed (in scope): its target is a page of its own, refused.
    page = crawl.pages.get(url=target)
    assert (page.status, page.redirects) == (None, [site.url + "/old"])
    assert page.error == f"blocked: 10.255.255.1 is a private address {SETTING}"
    assert crawl.pages.get(url=site.url + "/old").status == 302
    assert sorted(site.paths()) == ["/", "/old"] and crawl.failures.count() == 0


@pytest.mark.django_db
def test_with_the_setting_off_loopback_crawls_work(user, make_site, settings):
    settings.CRAWLHUB_BLOCK_PRIVATE_NETWORKS = False
    site = make_site(pages_site({"/": '<a href="/a">a</a>', "/a": "a"}))
    crawl = services.crawl_create(user=user, name="t", seeds=[site.url + "/"], obey_robots=False)
    services.crawl_start(crawl=crawl, user=user)
    crawl = drive(crawl, timeout=30)
    assert sorted(crawl.pages.values_list("status", "error")) == [(200, ""), (200, "")]


@pytest.mark.django_db
def test_private_seeds_are_refused_at_creation_naming_each_line(user, guard_on):
    seeds = [
        "http://93.184.216.34/",
        "http://127.0.0.1:8000/",
        "http://[::1]/",
        "http://[::ffff:10.0.0.5]/x",
        "http://169.254.169.254/latest/meta-data/",
    ]
    with pytest.raises(ValidationError) as caught:
        services.crawl_create(user=user, name="t", seeds=seeds)
    assert caught.value.message_dict["seeds"] == [
        f"line 2: 'http://127.0.0.1:8000/' is refused: 127.0.0.1 is a loopback address {SETTING}",
        f"line 3: 'http://[::1]/' is refused: ::1 is a loopback address {SETTING}",
        f"line 4: 'http://[::ffff:10.0.0.5]/x' is refused: ::ffff:a00:5 is a private address "
        f"{SETTING}",
        f"line 5: 'http://169.254.169.254/latest/meta-data/' is refused: 169.254.169.254 is a "
        f"link-local address {SETTING}",
    ]
    assert services.crawl_create(user=user, name="ok", seeds=seeds[:1]).seeds == seeds[:1]


@pytest.mark.django_db
def test_private_seeds_cannot_be_added_later(user, guard_on):
    crawl = services.crawl_create(user=user, name="t", seeds=["http://93.184.216.34/"])
    with pytest.raises(ValidationError, match="localhost resolves to 127.0.0.1"):
        services.crawl_add_seeds(crawl=crawl, urls="http://localhost/")
    crawl.refresh_from_db()
    assert crawl.seeds == ["http://93.184.216.34/"]


@pytest.mark.django_db
def test_the_new_crawl_form_shows_the_refusal_on_the_seeds_field(user_client, guard_on):
    data = form_data(user_client, "/crawls/new/", name="t", seeds="http://10.0.0.5/")
    response = user_client.post("/crawls/new/", data)
    assert response.status_code == 200
    assert response.context["form"].errors["seeds"] == [
        f"line 1: 'http://10.0.0.5/' is refused: 10.0.0.5 is a private address {SETTING}"
    ]


@pytest.mark.slow
@pytest.mark.parametrize(("env", "expected"), [({}, "False"), ({"CRAWLHUB_HTTPS": "1"}, "True")])
def test_the_setting_is_on_in_production_and_off_in_development(tmp_path, env, expected):
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CRAWLHUB_HTTPS", "CRAWLHUB_BLOCK_PRIVATE_NETWORKS")
    }
    clean.update({"CRAWLHUB_DATA_DIR": str(tmp_path), **env})
    code = (
        "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'crawlhub.settings');"
        "django.setup(); from django.conf import settings;"
        "print(settings.CRAWLHUB_BLOCK_PRIVATE_NETWORKS)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-1] == expected


# -- one reading of a URL: what the guard checks is where the socket goes ----------------------
#
# urllib.parse ends an authority at "/", requests and urllib3 (and browsers) at "\" too: before
# URLs were read once (crawlhub/http/urls.py), the guard and scope saw public.example in
# http://127.0.0.2:PORT\@public.example/../secret while the client connected to 127.0.0.2 and
# asked for /secret. The internal server here listens on 127.0.0.2, a loopback address; the
# site playing a public one on 127.0.0.1, let through by CRAWLHUB_PRIVATE_NETWORKS_ALLOWED.


@pytest.fixture
def internal(make_site):
    """An internal service on 127.0.0.2 that must never be reached."""
    return make_site(pages_site({"/secret": "<title>internal secret</title>"}), host="127.0.0.2")


def backslashed(internal) -> str:
    return f"http://127.0.0.2:{internal.port}\\@public.example/../secret"


def test_a_redirect_to_a_backslashed_authority_never_reaches_the_internal_host(
    make_site, site_allowed, internal
):
    outer = make_site(
        pages_site({"/": Response(status=302, headers={"Location": backslashed(internal)})})
    )
    site_allowed(outer.url)
    with Fetcher(timeout=10, max_bytes=10_000) as f:
        result = f.fetch(outer.url + "/", follow_redirects=False)
        followed = f.get(outer.url + "/")
    assert result.redirect_to == f"http://127.0.0.2:{internal.port}/secret"
    assert followed.error == f"blocked: 127.0.0.2 is a loopback address {SETTING}"
    assert internal.log == []


@pytest.mark.django_db
def test_a_crawl_never_fetches_an_internal_page_through_a_backslashed_link_or_redirect(
    user, make_site, site_allowed, internal
):
    target = backslashed(internal)
    site = make_site(
        pages_site(
            {
                "/": f'<a href="{target}">x</a> <a href="/moved">moved</a>',
                "/moved": Response(status=302, headers={"Location": target}),
            }
        )
    )
    site_allowed(site.url)
    crawl = services.crawl_create(
        user=user,
        name="t",
        seeds=[site.url + "/"],
        obey_robots=False,
        allowed_domains=["127.0.0.1", "127.0.0.2", "public.example"],
    )
    services.crawl_start(crawl=crawl, user=user)
    crawl = drive(crawl, timeout=30)
    assert internal.log == []
    # The link and the redirect are one URL, read as the client reads it, and refused.
    page = crawl.pages.get(url=f"http://127.0.0.2:{internal.port}/secret")
    assert page.status is None and not page.body
    assert page.error == f"blocked: 127.0.0.2 is a loopback address {SETTING}"
    assert "internal secret" not in "".join(crawl.pages.values_list("title", flat=True))


@pytest.mark.django_db
def test_a_backslashed_seed_is_refused_for_the_host_it_really_names(user, guard_on):
    seed = "http://127.0.0.2:8000\\@public.example/"
    with pytest.raises(ValidationError) as caught:
        services.crawl_create(user=user, name="t", seeds=[seed])
    assert caught.value.message_dict["seeds"] == [
        f"line 1: {seed!r} is refused: 127.0.0.2 is a loopback address {SETTING}"
    ]


@pytest.mark.django_db
def test_a_webhook_to_a_backslashed_authority_is_refused_and_never_delivered(
    user, guard_on, internal
):
    crawl = services.crawl_create(user=user, name="t", seeds=["http://93.184.216.34/"])
    url = f"http://127.0.0.2:{internal.port}\\@public.example/../secret"
    with pytest.raises(ValidationError, match="127.0.0.2 is a loopback address"):
        webhooks.webhook_create(user=user, url=url, events=["finished"], crawl=crawl)
    # One saved before this check (or by any other door) is refused when it is sent.
    webhook = Webhook.objects.create(
        crawl=crawl, url=url, events=["finished"], secret="s", created_by=user
    )
    delivery = WebhookDelivery.objects.create(
        webhook=webhook, crawl=crawl, event="finished", payload={}, next_attempt_at=timezone.now()
    )
    webhooks.deliver(delivery.pk, retry=False)
    delivery.refresh_from_db()
    assert delivery.error == f"BlockedAddress: 127.0.0.2 is a loopback address {SETTING}"
    assert internal.log == []


def test_the_socket_is_checked_when_dns_answers_differently_the_second_time(
    make_site, guard_on, monkeypatch
):
    """DNS rebinding: the name is public when the guard asks, private when the socket does.
    The answer the guard's own lookup gets is replaced (what a rebinding DNS server does);
    the socket's lookup is the machine's, where localhost is 127.0.0.1."""
    site = make_site(pages_site({"/": "<title>internal</title>"}))
    monkeypatch.setattr(netguard, "_resolve", lambda host: [ipaddress.ip_address("8.8.8.8")])
    netguard._cache.clear()
    with Fetcher(timeout=10, max_bytes=10_000) as f:
        result = f.fetch(f"http://localhost:{site.port}/")
    netguard._cache.clear()
    assert result.error == f"blocked: localhost resolves to 127.0.0.1, a loopback address {SETTING}"
    assert result.error_kind == "blocked" and site.log == []


def test_the_operators_url_is_exempt_at_connection_time_too(make_site, guard_on):
    own = make_site(pages_site({"/echo": '{"origin": "x"}'}))
    with Fetcher(timeout=10, max_bytes=10_000) as f:
        assert f.get(own.url + "/echo", operator_url=True).status == 200
        assert f.get(own.url + "/echo").error_kind == "blocked"  # the same pool, guarded
    assert own.paths() == ["/echo"]


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        (["10.1.2.3:0"], "'10.1.2.3:0' has a port that is not 1 to 65535"),
        (["intranet"], "'intranet' is not an address or network"),
    ],
)
def test_a_bad_allowed_entry_is_refused_naming_it(entries, message):
    with pytest.raises(ValueError, match=message):
        netguard.allowed_networks(tuple(entries))
