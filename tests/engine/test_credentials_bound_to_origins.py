"""A crawl's credentials go to the origins (scheme, host, port) they were entered for, fixed
when they were saved: not to a seed added later, from any door, nor to a draft's seeds edited
to another host, unless the crawl's owner enters them again. A schedule or a copy made by
anyone but the owner carries none; the owner's copies keep them, bound as they were. The audit
trail says what happened to them at every step, never with a value.

Two local sites on different ports play two origins; their logs are the proof."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from crawls import schedules, services
from crawls.engine.slices import run_slice
from crawls.models import Crawl, CrawlAuth, CrawlEvent, CrawlState
from tests.support.clients import bearer, form_data, post
from tests.support.crawling import drive
from tests.support.sites import pages_site

pytestmark = pytest.mark.django_db

HEADER_SECRET, COOKIE_SECRET, PASSWORD_SECRET = "hdr-BOUND-1111", "ck-BOUND-2222", "pw-BOUND-3333"
AUTH = {
    "headers": f"X-Token: {HEADER_SECRET}",
    "cookie": f"sid={COOKIE_SECRET}",
    "basic_user": "bob",
    "basic_password": PASSWORD_SECRET,
}
CARRIERS = {"authorization", "cookie", "x-token"}


def site_of(make_site, name: str):
    """A small site: / links /<name>."""
    return make_site(pages_site({"/": f'<a href="/{name}">{name}</a>', f"/{name}": name}))


def bare(site) -> None:
    """No request the site saw carried any credential of the crawl."""
    assert site.log, "the site saw no request"
    for request in site.log:
        names = {name.lower() for name in request.headers}
        assert not names & CARRIERS, (request.path, request.headers)


def carried(site, token: str = HEADER_SECRET) -> None:
    """Every request the site saw carried the three credentials."""
    assert site.log, "the site saw no request"
    for request in site.log:
        assert request.headers.get("X-Token") == token, (request.path, request.headers)
        assert request.headers["Authorization"].startswith("Basic ")
        assert f"sid={COOKIE_SECRET}" in request.headers["Cookie"]


def origin(site) -> str:
    return site.url  # http://127.0.0.1:<port>: scheme, host and port as the trail writes them


def trail(crawl: Crawl) -> str:
    details = list(crawl.events.values_list("detail", flat=True))
    text = "\n".join(details)
    for secret in (HEADER_SECRET, COOKIE_SECRET, PASSWORD_SECRET):
        assert secret not in text
    return text


def running_crawl(user, home, **options) -> Crawl:
    """A crawl of `home` with credentials, started, one slice run (it fetched `home`)."""
    options.setdefault("obey_robots", False)
    crawl = services.crawl_create(
        user=user, name="bound", seeds=[home.url + "/"], auth=AUTH, **options
    )
    services.crawl_start(crawl=crawl, user=user)
    run_slice(crawl.pk, "first", budget_seconds=3)
    crawl.refresh_from_db()
    assert crawl.state == CrawlState.RUNNING
    return crawl


def test_a_seed_added_to_a_running_crawl_on_another_port_gets_no_credential(user, make_site):
    home, other = site_of(make_site, "a"), site_of(make_site, "b")
    crawl = running_crawl(user, home, obey_robots=True)
    services.crawl_add_seeds(crawl=crawl, urls=[other.url + "/"], user=user)
    crawl = drive(crawl)
    assert crawl.state == CrawlState.FINISHED, crawl.error
    assert sorted(other.paths()) == ["/", "/b", "/robots.txt"]  # crawled, robots.txt too...
    bare(other)  # ... without the credentials
    carried(home)
    assert sorted(home.paths()) == ["/", "/a", "/robots.txt"]
    created = crawl.events.get(kind=CrawlEvent.Kind.CREATED).detail
    assert created.endswith(f"; bound to {origin(home)}"), created
    added = crawl.events.get(kind=CrawlEvent.Kind.SEEDS_ADDED).detail
    assert f"credentials kept, bound to {origin(home)} only: not sent to {origin(other)}" in added
    trail(crawl)


def test_every_add_seeds_door_says_the_new_origin_gets_no_credential(
    user, user_client, client, make_site, capsys
):
    home, other, third = (site_of(make_site, name) for name in "abc")
    crawl = running_crawl(user, home)
    page = user_client.get(f"/crawls/{crawl.pk}/").content.decode()
    assert f"The saved credentials go only to {origin(home)}" in page  # said at the form
    response = user_client.post(
        f"/crawls/{crawl.pk}/add-seeds/", {"urls": other.url + "/"}, follow=True
    )
    shown = [str(m) for m in response.context["messages"]]
    assert any(f"The saved credentials are not sent to {origin(other)}" in m for m in shown), shown
    answer = post(
        client, f"/api/crawls/{crawl.pk}/seeds/", {"urls": [third.url + "/"]}, **bearer(user)
    )
    assert answer.status_code == 200
    assert answer.json()["credentials_not_sent_to"] == sorted([origin(other), origin(third)])
    call_command("crawl", "add-seeds", str(crawl.pk), third.url + "/x")
    out = capsys.readouterr().out
    assert "credentials are not sent to" in out and origin(third) in out
    # None of them moved the credentials: still bound to the one origin they were given for.
    assert CrawlAuth.objects.get(crawl=crawl).origins == [["http", "127.0.0.1", home.port]]
    assert trail(crawl).count("credentials kept, bound to") == 3


def test_a_draft_whose_seeds_move_to_another_port_keeps_credentials_for_the_old_origin_only(
    user, user_client, make_site
):
    old = make_site(pages_site({"/": "old", "/kept": "kept"}))
    new = make_site(pages_site({"/": f'<a href="{old.url}/kept">the old site</a>'}))
    crawl = services.crawl_create(
        user=user, name="draft", seeds=[old.url + "/"], auth=AUTH, obey_robots=False
    )
    path = f"/crawls/{crawl.pk}/edit/"
    page = user_client.get(path).content.decode()
    assert f"bound to {origin(old)}" in page and "new origins do not get them" in page
    response = user_client.post(path, form_data(user_client, path, seeds=new.url + "/"))
    assert response.status_code == 302, response.context["form"].errors
    crawl.refresh_from_db()
    assert crawl.seeds == [new.url + "/"]
    services.crawl_start(crawl=crawl, user=user)
    crawl = drive(crawl)
    assert crawl.state == CrawlState.FINISHED, crawl.error
    bare(new)  # the new seed's origin: nothing
    assert old.paths() == ["/kept"]  # the old origin, reached by a link: still bound there
    carried(old)
    edited = crawl.events.get(kind=CrawlEvent.Kind.EDITED).detail
    assert f"credentials kept, bound to {origin(old)} only: not sent to {origin(new)}" in edited
    trail(crawl)


def test_the_owner_re_entering_credentials_binds_them_to_the_seeds_as_they_are(
    user, staff, client, user_client, staff_client, make_site
):
    home, other = site_of(make_site, "a"), site_of(make_site, "b")
    crawl = running_crawl(user, home)
    services.crawl_add_seeds(crawl=crawl, urls=[other.url + "/"], user=user)
    new_auth = {**AUTH, "headers": "X-Token: hdr-AGAIN-9999"}
    # Staff may see the crawl, not enter its owner's credentials: refused at each door.
    assert (
        post(client, f"/api/crawls/{crawl.pk}/credentials/", new_auth, **bearer(staff)).status_code
        == 403
    )
    assert staff_client.get(f"/crawls/{crawl.pk}/credentials/").status_code == 403
    assert CrawlAuth.objects.get(crawl=crawl).headers == [["X-Token", HEADER_SECRET]]
    page = user_client.get(f"/crawls/{crawl.pk}/credentials/").content.decode()
    assert origin(home) in page and origin(other) in page
    answer = post(client, f"/api/crawls/{crawl.pk}/credentials/", new_auth, **bearer(user))
    assert answer.status_code == 200, answer.content
    assert answer.json()["auth"]["origins"] == sorted([origin(home), origin(other)])
    assert "hdr-AGAIN-9999" not in answer.content.decode()
    home.log.clear()
    crawl = drive(crawl)
    assert crawl.state == CrawlState.FINISHED, crawl.error
    carried(other, token="hdr-AGAIN-9999")  # its requests came after the credentials did
    entered = crawl.events.get(kind=CrawlEvent.Kind.CREDENTIALS)
    assert entered.user == user
    assert entered.detail == (
        "credentials re-entered: headers X-Token; cookies sid; basic auth as bob; bound to "
        f"{', '.join(sorted([origin(home), origin(other)]))}"
    )
    assert "hdr-AGAIN-9999" not in trail(crawl)


def test_a_schedule_staff_made_of_someone_else_s_crawl_runs_without_credentials(
    user, staff, staff_client, make_site
):
    site = site_of(make_site, "a")
    template = services.crawl_create(
        user=user, name="nightly", seeds=[site.url + "/"], auth=AUTH, obey_robots=False
    )
    theirs = schedules.schedule_create(user=staff, template=template, cron="@daily")
    page = staff_client.get(f"/schedules/{theirs.pk}/").content.decode()
    assert "Runs carry none of the template&#x27;s credentials" in page
    run = drive(schedules.schedule_run(schedule=theirs))
    assert run.created_by == staff and run.state == CrawlState.FINISHED
    assert not CrawlAuth.objects.filter(crawl=run).exists()
    bare(site)
    note = run.events.get(kind=CrawlEvent.Kind.CREATED).detail
    assert note == f"a run of schedule #{theirs.pk} of #{template.pk}, {services.COPIES_GET_NONE}"
    # The owner's own schedule: its runs keep them, bound to the template's origins.
    site.log.clear()
    mine = schedules.schedule_create(user=user, template=template, cron="@daily")
    assert schedules.runs_credentials(mine) == (
        f"Each run carries the template's credentials, sent only to {origin(site)}, the origins "
        "they were entered for."
    )
    run = drive(schedules.schedule_run(schedule=mine))
    assert run.auth.origins == template.auth.origins == [["http", "127.0.0.1", site.port]]
    carried(site)
    assert f"with its credentials, bound to {origin(site)}" in trail(run)


def test_run_again_keeps_the_bound_origins_for_the_owner_and_nothing_for_staff(
    user, staff, make_site
):
    home, other = site_of(make_site, "a"), site_of(make_site, "b")
    crawl = running_crawl(user, home)
    services.crawl_add_seeds(crawl=crawl, urls=[other.url + "/"], user=user)
    services.crawl_cancel(crawl=crawl, user=user)
    home.log.clear()
    other.log.clear()
    mine = services.crawl_run_again(crawl=crawl, user=user)
    assert mine.seeds == [home.url + "/", other.url + "/"]
    assert mine.auth.origins == [["http", "127.0.0.1", home.port]]  # as they were bound
    services.crawl_start(crawl=mine, user=user)
    assert drive(mine).state == CrawlState.FINISHED
    carried(home)
    bare(other)
    assert f"a copy of #{crawl.pk}, with its credentials, bound to {origin(home)}" in trail(mine)

    home.log.clear()
    other.log.clear()
    theirs = services.crawl_run_again(crawl=crawl, user=staff)
    assert not CrawlAuth.objects.filter(crawl=theirs).exists()
    services.crawl_start(crawl=theirs, user=staff)
    assert drive(theirs).state == CrawlState.FINISHED
    bare(home)
    bare(other)
    assert f"a copy of #{crawl.pk}, {services.COPIES_GET_NONE}" in trail(theirs)


def test_the_api_and_the_crawl_page_say_where_the_credentials_go(user, user_client, make_site):
    home, other = site_of(make_site, "a"), site_of(make_site, "b")
    crawl = running_crawl(user, home)
    services.crawl_add_seeds(crawl=crawl, urls=[other.url + "/"], user=user)
    shown = json.loads(user_client.get(f"/api/crawls/{crawl.pk}/").content)["auth"]
    assert shown["origins"] == [origin(home)]
    page = user_client.get(f"/crawls/{crawl.pk}/").content.decode()
    assert "Credentials sent to" in page and "enter them again" in page


@pytest.mark.django_db(transaction=True)  # migrations run outside a test's transaction
def test_the_migration_binds_saved_credentials_to_their_crawls_seeds_as_they_are(user):
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes("crawls")
    before = [("crawls", "0016_crawl_list_newest_index")]
    executor.migrate(before)
    try:
        old = executor.loader.project_state(before).apps
        channel, _ = old.get_model("crawls", "Channel").objects.get_or_create(
            slug="default", defaults={"name": "Default"}
        )
        crawl = old.get_model("crawls", "Crawl").objects.create(
            name="saved before",
            channel=channel,
            seeds=["http://a.example/", "https://b.example:8443/x", "https://b.example:8443/y"],
            created_by_id=user.pk,
        )
        old.get_model("crawls", "CrawlAuth").objects.create(
            crawl=crawl, headers=[["X-Token", HEADER_SECRET]]
        )
        old.get_model("crawls", "Crawl").objects.create(
            name="none", channel=crawl.channel, seeds=["http://c.example/"]
        )
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(latest)
    row = CrawlAuth.objects.get(crawl_id=crawl.pk)
    # An http seed on the default port binds https on it too (a site moving to https).
    assert row.origins == [
        ["http", "a.example", 80],
        ["https", "a.example", 443],
        ["https", "b.example", 8443],
    ]
    assert CrawlAuth.objects.count() == 1
    event = CrawlEvent.objects.get(crawl_id=crawl.pk)
    assert (event.kind, event.user) == (CrawlEvent.Kind.CREDENTIALS, None)
    assert event.detail == (
        "credentials bound to http://a.example:80, https://a.example:443, https://b.example:8443 "
        "(its seeds' origins when crawlhub began binding credentials to origins)"
    )


def test_only_the_owner_enters_a_draft_s_credentials_and_staff_may_remove_them(
    user, staff, staff_client, make_site
):
    site, other = site_of(make_site, "a"), site_of(make_site, "b")
    crawl = services.crawl_create(user=user, name="draft", seeds=[site.url + "/"], auth=AUTH)
    path = f"/crawls/{crawl.pk}/edit/"
    page = staff_client.get(path).content.decode()
    assert "Only the crawl&#x27;s owner (alice) can enter its credentials" in page
    assert 'name="headers"' not in page and 'name="remove_headers"' in page
    with pytest.raises(ValidationError) as caught:
        services.crawl_update(
            crawl=crawl,
            user=staff,
            name="draft",
            seeds=[other.url + "/"],
            auth={"headers": "X-Token: staff-SECRET"},
        )
    assert caught.value.message_dict[NON_FIELD_ERRORS] == [services.owner_only(crawl)]
    assert CrawlAuth.objects.get(crawl=crawl).headers == [["X-Token", HEADER_SECRET]]
    response = staff_client.post(path, form_data(staff_client, path, remove_headers="on"))
    assert response.status_code == 302, response.context["form"].errors
    assert CrawlAuth.objects.get(crawl=crawl).headers == []
    event = crawl.events.get(kind=CrawlEvent.Kind.EDITED)
    assert event.user == staff
    assert event.detail == (
        f"removed the saved extra headers; the other credentials kept, bound to {origin(site)}"
    )


def test_seeds_changed_in_the_admin_leave_the_credentials_where_they_were_on_the_trail(
    user, staff, staff_client, make_site
):
    staff.is_superuser = True
    staff.save()
    site, other = site_of(make_site, "a"), site_of(make_site, "b")
    crawl = services.crawl_create(
        user=user, name="admin", seeds=[site.url + "/"], auth=AUTH, obey_robots=False
    )
    path = f"/admin/crawls/crawl/{crawl.pk}/change/"
    form = staff_client.get(path).context["adminform"].form
    data = {
        **{name: value for name in form.fields if (value := form[name].value()) is not None},
        "seeds": json.dumps([other.url + "/"]),
        "allowed_domains": "[]",
        "include_patterns": "[]",
        "exclude_patterns": "[]",
        "host_delay": "",
        "extract_rules": "[]",
        "events-TOTAL_FORMS": 1,
        "events-INITIAL_FORMS": 1,
        "events-0-id": crawl.events.get().pk,
        "events-0-crawl": crawl.pk,
    }
    response = staff_client.post(path, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    crawl.refresh_from_db()
    assert crawl.seeds == [other.url + "/"]
    services.crawl_start(crawl=crawl, user=user)
    assert drive(crawl).state == CrawlState.FINISHED
    bare(other)
    event = crawl.events.get(kind=CrawlEvent.Kind.EDITED)
    assert event.user == staff
    assert event.detail == (
        f"changed seeds in the admin; credentials kept, bound to {origin(site)} only: not sent "
        f"to {origin(other)}"
    )
