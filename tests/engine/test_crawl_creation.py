"""Creating crawls: every bad input named by field; seeds into the frontier; the admin. (Which
actions each state allows: test_pause_resume.py.)"""

import importlib

import pytest
from django.apps import apps
from django.core.exceptions import ValidationError
from django.db import connection
from django.db.migrations.recorder import MigrationRecorder
from hypothesis import given
from hypothesis import strategies as st

from crawls import services
from crawls.engine.frontier import Frontier
from crawls.models import (
    CRAWL_OPTIONS,
    MAX_BODY_BYTES,
    Channel,
    Crawl,
    CrawlDeletion,
    CrawlEvent,
    CrawlState,
)
from tests.support.fuzzing import PROPERTY

pytestmark = pytest.mark.django_db


def create(user, **kwargs):
    kwargs.setdefault("name", "docs")
    kwargs.setdefault("seeds", ["http://127.0.0.1:9/"])
    return services.crawl_create(user=user, **kwargs)


def errors_of(user, **kwargs) -> dict:
    with pytest.raises(ValidationError) as caught:
        create(user, **kwargs)
    return caught.value.message_dict


def test_a_crawl_is_created_in_draft_in_the_default_channel(user):
    crawl = create(user, seeds="http://127.0.0.1:9/a\n\nhttp://127.0.0.1:9/a\nhttps://x.test/")
    assert crawl.state == CrawlState.DRAFT
    assert crawl.channel == Channel.default()
    assert crawl.seeds == ["http://127.0.0.1:9/a", "https://x.test/"]
    assert list(crawl.events.values_list("kind", "user")) == [("created", user.pk)]


@pytest.mark.parametrize(
    "seed", ["ftp://example.com/", "example.com", "javascript:alert(1)", "http://", "mailto:a@b.c"]
)
def test_a_seed_that_is_not_an_http_url_is_rejected_naming_the_field(user, seed):
    errors = errors_of(user, seeds=["http://ok.test/", seed])
    assert "seeds" in errors
    assert "line 2" in errors["seeds"][0]


def test_no_seed_at_all_is_rejected(user):
    assert errors_of(user, seeds="  \n ")["seeds"] == ["Give at least one http(s) URL."]


def test_an_invalid_regex_is_rejected_naming_the_field_and_line(user):
    errors = errors_of(user, include_patterns=["/docs/", "a(b"], exclude_patterns="[z")
    assert "a(b" in errors["include_patterns"][0]
    assert "line 2" in errors["include_patterns"][0]
    assert "[z" in errors["exclude_patterns"][0]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_pages", -1),
        ("max_pages", 0),
        ("max_depth", -2),
        ("threads", 0),
        ("timeout", -1.0),
        ("max_retries", 99),
        ("priority", 1000),
        ("host_delay", -0.5),
    ],
)
def test_a_bad_limit_is_rejected_naming_the_field(user, field, value):
    assert field in errors_of(user, **{field: value})


def test_max_bytes_is_at_most_50_mb_and_threads_times_max_bytes_at_most_256_mb(user):
    assert errors_of(user, max_bytes=3 * 10**9) == {
        "max_bytes": ["At most 52428800 bytes (50 MB)."]
    }
    assert (
        "16 x 52428800 bytes is 800 MB"
        in errors_of(user, threads=16, max_bytes=50 << 20)["max_bytes"][0]
    )
    assert create(user, threads=5, max_bytes=50 << 20).max_bytes == MAX_BODY_BYTES
    assert create(user, threads=128, max_bytes=2 << 20).threads == 128


def test_crawls_saved_before_the_bound_are_brought_to_it_by_the_migration(user):
    over, under = create(user), create(user)
    Crawl.objects.filter(pk=over.pk).update(max_bytes=2 * 10**9)  # PostgreSQL: at most 2^31-1
    migration = importlib.import_module("crawls.migrations.0006_max_bytes_bound")
    migration.clamp_max_bytes(apps, None)
    assert Crawl.objects.get(pk=over.pk).max_bytes == MAX_BODY_BYTES
    assert Crawl.objects.get(pk=under.pk).max_bytes == 5 << 20


def test_every_bad_field_is_reported_at_once(user):
    errors = errors_of(user, name="", seeds=["nope"], max_pages=0, include_patterns=["("])
    assert {"name", "seeds", "max_pages", "include_patterns"} <= set(errors)


def test_a_domain_with_a_scheme_is_rejected(user):
    assert "allowed_domains" in errors_of(user, allowed_domains=["https://example.com"])


@pytest.mark.parametrize(
    ("options", "field", "message"),
    [
        ({"user_agent": "Bot/1\nX-Evil: 1"}, "user_agent", "must be a single line"),
        ({"user_agent": "Bot/1\r"}, "user_agent", "must be a single line"),
        (
            {"user_agent": "Bot \u2603"},
            "user_agent",
            "'\u2603' cannot be sent in an HTTP header (Latin-1 only)",
        ),
        (
            {"allowed_domains": ["\u00fc" * 64]},
            "allowed_domains",
            f"line 1: {chr(252) * 64!r} is not a domain name",
        ),
    ],
    ids=["line-break", "carriage-return", "not-latin-1", "domain-no-host-name"],
)
def test_what_a_slice_would_refuse_is_refused_when_the_crawl_is_saved(
    user, options, field, message
):
    assert errors_of(user, user_agent_mode="fixed", **options) == {field: [message]}


def test_a_channel_setting_a_slice_would_refuse_is_named(user):
    channel = Channel.objects.create(slug="odd", name="Odd")
    Channel.objects.filter(pk=channel.pk).update(user_agent_mode="rotating")
    channel.refresh_from_db()
    assert errors_of(user, channel=channel) == {
        "user_agent_mode": ["'rotating' is not one of fixed, random"]
    }


def test_an_edit_in_the_admin_is_checked_as_a_new_crawl_is(staff_client, django_user_model):
    staff = django_user_model.objects.get(username="sam")
    staff.is_superuser = True
    staff.save()
    crawl = create(staff)
    page = staff_client.get(f"/admin/crawls/crawl/{crawl.pk}/change/")
    form = page.context["adminform"].form
    data = {
        # A value left empty (a yes/no/the channel's option) is not sent, as a browser does.
        **{name: value for name in form.fields if (value := form[name].value()) is not None},
        "seeds": '["http://127.0.0.1:9/"]',
        "allowed_domains": "[]",
        "include_patterns": "[]",
        "exclude_patterns": "[]",
        "host_delay": "",
        "user_agent_mode": "fixed",
        "user_agent": "Bot/1\nX-Evil: 1",
        "events-TOTAL_FORMS": 1,
        "events-INITIAL_FORMS": 1,
        "events-0-id": crawl.events.get().pk,
        "events-0-crawl": crawl.pk,
    }
    response = staff_client.post(f"/admin/crawls/crawl/{crawl.pk}/change/", data)
    assert response.status_code == 200, "the edit was saved"
    assert response.context["adminform"].form.errors["user_agent"] == ["must be a single line"]
    assert Crawl.objects.get(pk=crawl.pk).user_agent == ""
    data["user_agent"] = "Bot/1"
    assert staff_client.post(f"/admin/crawls/crawl/{crawl.pk}/change/", data).status_code == 302
    assert Crawl.objects.get(pk=crawl.pk).user_agent == "Bot/1"


LINES = "Give a list of strings, or text with one value per line."


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("name", 5, "Expected text, got int."),
        ("seeds", None, LINES),
        ("seeds", 5, LINES),
        ("seeds", [1], LINES),
        ("allowed_domains", 0, LINES),
        ("allowed_domains", [["a.test"]], LINES),
        ("include_patterns", [1], LINES),
        ("user_agent", ["x"], "Expected text, got list."),
        ("user_agent", None, "Expected text, got NoneType."),
        ("threads", float("inf"), "Enter a finite number."),
        ("timeout", float("nan"), "Enter a finite number."),
        ("timeout", "nan", "Enter a finite number."),
        ("host_delay", float("nan"), "Enter a finite number."),
        ("name", "a\x00b", "Null characters are not allowed."),
        ("user_agent", "bot\x00", "Null characters are not allowed."),
        ("include_patterns", ["/a\x00"], "Null characters are not allowed."),
        (
            "allowed_domains",
            ["a\x01.test"],
            "'a\\x01.test' is not a domain name (no scheme, path or port)",
        ),
    ],
    ids=[
        "name-int",
        "seeds-none",
        "seeds-int",
        "seeds-ints",
        "domains-int",
        "domains-nested",
        "patterns-ints",
        "agent-list",
        "agent-none",
        "threads-inf",
        "timeout-nan",
        "timeout-nan-text",
        "delay-nan",
        "name-nul",
        "agent-nul",
        "pattern-nul",
        "domain-control",
    ],
)
def test_a_value_of_the_wrong_kind_is_refused_naming_the_field(user, field, value, message):
    """What a door that passes its values through (the admin's JSON fields, the CLI's floats, a
    script) may hand over: a ValidationError on the field, never a TypeError or a row that
    cannot be stored (NaN, NUL)."""
    assert errors_of(user, **{field: value})[field] == [message]


options = {
    name: st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.integers(-(10**30), 10**30),
        st.floats(),
        st.text(max_size=12),
        st.sampled_from(["", "nan", "inf", "1e999", "9" * 30, "a\x00b"]),
        st.lists(st.text(max_size=12), max_size=3),
        st.lists(st.integers(), max_size=2),
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    )
    for name in CRAWL_OPTIONS
}
seeds = st.one_of(
    st.just(["http://127.0.0.1:9/"]),
    st.text(max_size=30),
    st.lists(st.text(max_size=30)),
    st.none(),
    st.integers(),
)


@pytest.mark.slow
@PROPERTY
@given(
    name=st.one_of(st.just("docs"), st.none(), st.integers(), st.text(max_size=30)),
    seeds=seeds,
    values=st.fixed_dictionaries({}, optional=options),
)
def test_any_option_values_give_a_saved_crawl_or_errors_naming_fields(user, name, seeds, values):
    try:
        crawl = services.crawl_create(user=user, name=name, seeds=seeds, **values)
    except ValidationError as refused:
        assert set(refused.message_dict) <= {"name", "seeds", *CRAWL_OPTIONS}
        assert all(refused.message_dict.values())
        return
    crawl.refresh_from_db()
    assert crawl.seeds and all(isinstance(url, str) for url in crawl.seeds)


def test_start_puts_the_seeds_in_the_frontier(user):
    crawl = create(user, seeds=["http://127.0.0.1:9/", "http://127.0.0.1:9/#x"])
    services.crawl_start(crawl=crawl, user=user)
    stats = services.crawl_stats(crawl)
    assert stats["requests"] == 1  # one URL after canonicalization
    assert stats["queued"] == 1


def test_seeds_added_to_a_running_crawl_are_deduplicated(user):
    crawl = create(user)
    services.crawl_start(crawl=crawl, user=user)
    added, seen = services.crawl_add_seeds(
        crawl=crawl, user=user, urls=["http://127.0.0.1:9/", "http://127.0.0.1:9/new"]
    )
    assert (added, seen) == (1, 1)
    assert crawl.seeds == ["http://127.0.0.1:9/", "http://127.0.0.1:9/new"]
    assert crawl.events.filter(kind=CrawlEvent.Kind.SEEDS_ADDED).count() == 1


def test_bad_seeds_added_later_are_rejected(user):
    crawl = create(user)
    with pytest.raises(ValidationError) as caught:
        services.crawl_add_seeds(crawl=crawl, user=user, urls=["not a url"])
    assert "seeds" in caught.value.message_dict


def test_the_default_channel_exists_after_migrations():
    # The row is a data migration's: applied to the test database, and run again here from
    # nothing, because a transactional test that ran before this one in the same worker (xdist
    # hands out files in its own order) flushed every table, that row with them.
    recorder = MigrationRecorder(connection)
    assert recorder.migration_qs.filter(app="crawls", name="0002_default_channel").exists()
    Channel.objects.filter(slug="default").delete()
    migration = importlib.import_module("crawls.migrations.0002_default_channel")
    migration.create_default_channel(apps, None)
    assert Channel.objects.filter(slug="default").exists()


def test_the_admin_creates_and_starts_crawls_through_the_services(staff_client, django_user_model):
    from crawls.models import Crawl

    staff = django_user_model.objects.get(username="sam")
    staff.is_superuser = True
    staff.save()
    response = staff_client.post(
        "/admin/crawls/crawl/add/",
        {
            "name": "from admin",
            "channel": Channel.default().pk,
            "seeds": '["http://127.0.0.1:9/"]',
            "allowed_domains": "[]",
            "include_patterns": '["("]',
            "exclude_patterns": "[]",
            "max_depth": 2,
            "max_pages": 10,
            "priority": 0,
            "threads": 2,
            "slices": 1,
            "timeout": 5,
            "max_bytes": 100000,
            "max_retries": 1,
            "user_agent_mode": "",
            "user_agent": "",
            "host_concurrency": 0,
            "events-TOTAL_FORMS": 0,
            "events-INITIAL_FORMS": 0,
        },
    )
    assert response.status_code == 200  # the bad regex is refused
    assert not Crawl.objects.exists()
    assert "not a valid regular expression" in response.content.decode()
    data = {**response.wsgi_request.POST.dict(), "include_patterns": '["/docs/"]'}
    created = staff_client.post("/admin/crawls/crawl/add/", data)
    assert created.status_code == 302
    crawl = Crawl.objects.get()
    assert crawl.created_by == staff
    assert list(crawl.events.values_list("kind", flat=True)) == ["created"]


def test_deleting_a_crawl_in_the_admin_cancels_it_and_retires_its_redis_keys(
    staff_client, django_user_model, redis, django_capture_on_commit_callbacks
):
    """As every door deletes (services.crawl_delete; each door: test_crawl_deletion.py)."""
    staff = django_user_model.objects.get(username="sam")
    staff.is_superuser = True
    staff.save()
    crawl = create(staff)
    services.crawl_start(crawl=crawl, user=staff)
    with django_capture_on_commit_callbacks(execute=True):
        response = staff_client.post(f"/admin/crawls/crawl/{crawl.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not type(crawl).objects.filter(pk=crawl.pk).exists()
    assert CrawlDeletion.objects.get(crawl_id=crawl.pk).state == CrawlState.CANCELLED
    assert redis.keys(Frontier(crawl.pk).key("*")) == [Frontier(crawl.pk).key("state").encode()]
