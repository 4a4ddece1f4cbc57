"""`manage.py crawl` from creation to the end of a crawl, as a script would drive it."""

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from crawls.management.commands.crawl import Command
from crawls.models import CRAWL_OPTIONS, Crawl, CrawlState
from tests.support.crawling import drive
from tests.support.sites import pages_site

pytestmark = pytest.mark.django_db


def crawl_cli(*args: str) -> str:
    out = io.StringIO()
    call_command("crawl", *args, stdout=out)
    return out.getvalue()


def test_create_start_wait_status_and_list(user, make_site):
    site = make_site(pages_site({"/": '<a href="/a">a</a>', "/a": "<title>A</title>"}))
    crawl_id = crawl_cli(
        "create",
        "--name",
        "cli",
        "--seed",
        site.url + "/",
        "--no-robots",
        "--max-retries",
        "0",
        "--user",
        user.username,
        "--start",
    ).strip()
    crawl = Crawl.objects.get(pk=int(crawl_id))
    assert (crawl.state, crawl.max_retries, crawl.obey_robots) == (CrawlState.RUNNING, 0, False)
    running = json.loads(crawl_cli("status", crawl_id, "--json"))
    assert running["state"] == "running" and running["finished_at"] is None
    assert running["seconds"] >= 0

    drive(crawl)
    waited = json.loads(crawl_cli("wait", crawl_id, "--timeout", "5"))
    status = json.loads(crawl_cli("status", crawl_id, "--json"))
    assert waited == status
    assert (status["state"], status["responses"], status["requests"]) == ("finished", 2, 2)
    assert status["end_reason"] == "finished"
    assert status["end_line"] == "Finished: every URL it scheduled was done (2 answered, 0 errors)."
    crawl.refresh_from_db()
    assert status["seconds"] == round((crawl.finished_at - crawl.started_at).total_seconds(), 3)
    listed = json.loads(crawl_cli("list", "--json", "--state", "finished"))
    assert listed == [{"id": crawl.pk, "name": "cli", "state": "finished", "channel": "default"}]
    assert f"{crawl.pk:>6}  finished" in crawl_cli("list")


def test_status_of_a_draft_has_no_times_and_wait_times_out(user):
    crawl_id = crawl_cli("create", "--name", "d", "--seed", "http://e.test/").strip()
    status = json.loads(crawl_cli("status", crawl_id, "--json"))
    assert (status["state"], status["started_at"], status["seconds"]) == ("draft", None, None)
    with pytest.raises(CommandError, match=f"crawl {crawl_id} is still draft after 0.3 s"):
        crawl_cli("wait", crawl_id, "--timeout", "0.3")


def test_wait_fails_for_a_crawl_that_did_not_finish(user):
    crawl_id = crawl_cli("create", "--name", "c", "--seed", "http://e.test/", "--start").strip()
    crawl_cli("cancel", crawl_id)
    with pytest.raises(CommandError, match=f"crawl {crawl_id} ended cancelled"):
        crawl_cli("wait", crawl_id)


def test_the_flags_scripts_and_the_readme_use_keep_working():
    parser = Command().create_parser("manage.py", "crawl")
    given = parser.parse_args(
        [
            "create",
            "--name",
            "n",
            "--seed",
            "http://e.test/",
            "--allowed-domain",
            "a.test",
            "--allowed-domain",
            "b.test",
            "--include",
            "/docs/",
            "--exclude",
            r"\.pdf$",
            "--no-robots",
            "--keep-bodies",
            "--max-depth",
            "2",
            "--max-pages",
            "5",
            "--priority",
            "1",
            "--threads",
            "4",
            "--slices",
            "1",
            "--host-delay",
            "0.5",
            "--user-agent-mode",
            "fixed",
            "--user-agent",
            "bot/1",
            "--timeout",
            "3",
            "--max-bytes",
            "2048",
            "--max-retries",
            "0",
            "--follow-sitemaps",
            "--extract-rules",
            '[{"name": "h", "kind": "css", "expr": "h1"}]',
        ]
    )
    assert {name: getattr(given, name) for name in CRAWL_OPTIONS} == {
        "allowed_domains": ["a.test", "b.test"],
        "include_patterns": ["/docs/"],
        "exclude_patterns": [r"\.pdf$"],
        "max_depth": 2,
        "max_pages": 5,
        "priority": 1,
        "host_concurrency": None,
        "threads": 4,
        "slices": 1,
        "host_delay": 0.5,
        "obey_robots": False,
        "user_agent_mode": "fixed",
        "user_agent": "bot/1",
        "timeout": 3.0,
        "max_bytes": 2048,
        "max_retries": 0,
        "keep_bodies": True,
        "follow_sitemaps": True,
        "extract_rules": [{"name": "h", "kind": "css", "expr": "h1"}],
        "keep_structured_data": None,  # left out: the model's default
        "render_javascript": None,
        "render_wait_selector": None,  # left out: the channel's
    }
    assert (
        parser.parse_args(
            ["create", "--name", "n", "--seed", "http://e.test/", "--obey-robots"]
        ).obey_robots
        is True
    )
    with pytest.raises(CommandError, match="not allowed with argument"):
        parser.parse_args(
            ["create", "--name", "n", "--seed", "http://e.test/", "--obey-robots", "--no-robots"]
        )


def test_an_option_left_out_is_the_model_s_default(user):
    crawl_id = crawl_cli("create", "--name", "d", "--seed", "http://e.test/")
    crawl = Crawl.objects.get(pk=int(crawl_id))
    left_out = (crawl.allowed_domains, crawl.obey_robots, crawl.keep_bodies, crawl.host_delay)
    assert left_out == ([], True, False, None)


def test_a_crawl_created_without_user_belongs_to_the_one_admin(user, staff, django_user_model):
    """It used to have no owner: no one but staff could see it, nor enter its credentials."""
    admin = django_user_model.objects.create_superuser(username="root", password="x" * 12)
    crawl_id = crawl_cli("create", "--name", "cli", "--seed", "http://a.test/").strip()
    assert Crawl.objects.get(pk=int(crawl_id)).created_by == admin


def test_without_user_and_no_single_admin_create_says_it_has_no_owner(user):
    err = io.StringIO()
    call_command(
        "crawl",
        "create",
        "--name",
        "cli",
        "--seed",
        "http://a.test/",
        stdout=io.StringIO(),
        stderr=err,
    )
    crawl = Crawl.objects.get()
    assert crawl.created_by is None
    assert err.getvalue() == (
        f"crawl {crawl.pk} has no owner (no --user, and not exactly one admin): only staff see "
        "it; name the crawl's owner with --user\n"
    )
