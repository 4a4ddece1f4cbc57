"""Scheduled crawls: a template re-run on a cron expression, each run a new linked crawl."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import django_rq
import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st
from rq.cron import get_cron_job_ids
from rq.job import Job

from crawls import alert_checks, schedules, services
from crawls.engine.frontier import Frontier
from crawls.models import CRAWL_OPTIONS, Crawl, CrawlSchedule, CrawlState
from tests.support import processes
from tests.support.crawling import ROOT, WorkerFleet, database_url, fetched_paths, wait_for_state
from tests.support.fuzzing import PROPERTY
from tests.support.sites import pages_site

pytestmark = pytest.mark.django_db


def make_template(user, **options) -> Crawl:
    options.setdefault("obey_robots", False)
    return services.crawl_create(
        user=user,
        name="nightly",
        seeds=["http://127.0.0.1:9/a", "http://127.0.0.1:9/b"],
        max_pages=77,
        max_depth=2,
        include_patterns=["/a"],
        keep_bodies=True,
        **options,
    )


def due_schedule(user, cron: str = "*/5 * * * *") -> CrawlSchedule:
    schedule = schedules.schedule_create(user=user, template=make_template(user), cron=cron)
    CrawlSchedule.objects.filter(pk=schedule.pk).update(
        next_run_at=timezone.now() - timedelta(seconds=1)
    )
    schedule.refresh_from_db()
    return schedule


@pytest.mark.parametrize("bad", ["", "61 * * * *", "* * *", "every day", "* * * * * * *"])
def test_a_bad_cron_expression_is_refused_naming_the_field(user, bad):
    with pytest.raises(ValidationError) as refused:
        schedules.schedule_create(user=user, template=make_template(user), cron=bad)
    assert list(refused.value.message_dict) == ["cron"]
    assert "is not a cron expression" in refused.value.message_dict["cron"][0]
    assert not CrawlSchedule.objects.exists()


@pytest.mark.parametrize("never", ["0 0 31 2 *", "0 0 30 2 *", "* * 31 4,6,9,11 *"])
def test_a_cron_expression_no_date_has_is_refused_naming_the_field(user, never):
    """Five valid fields that never come (the 30th of February): croniter finds no next run."""
    with pytest.raises(ValidationError) as refused:
        schedules.schedule_create(user=user, template=make_template(user), cron=never)
    assert refused.value.message_dict == {
        "cron": [
            f"{never!r} never runs: no date has that day in that month (e.g. '0 0 30 2 *', the "
            "30th of February)."
        ]
    }
    assert not CrawlSchedule.objects.exists()


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("1," * 60 + "2 * * * *", "At most 100 characters (this one has 129)."),
        (["0 3 * * *"], "Give the cron expression as text, e.g. '0 3 * * *'."),
        (5, "Give the cron expression as text, e.g. '0 3 * * *'."),
    ],
    ids=["long", "list", "number"],
)
def test_a_cron_expression_too_long_or_not_text_is_refused(user, bad, message):
    schedule = due_schedule(user)
    with pytest.raises(ValidationError) as refused:
        schedules.schedule_update(schedule=schedule, cron=bad)
    assert list(refused.value.message_dict) == ["cron"]
    assert message in refused.value.message_dict["cron"][0]


cron_fields = st.one_of(
    st.from_regex(r"[0-9*/,LW#?-]{1,6}|[A-Za-z]{3}", fullmatch=True),
    st.integers(-1, 10**20).map(str),
    st.text(max_size=4),
)


crons = st.one_of(
    st.lists(cron_fields, min_size=5, max_size=5).map(" ".join),
    # The last days of a month: some months have no such day.
    st.builds(
        "{} {} {} {} *".format,
        st.integers(0, 59),
        st.integers(0, 23),
        st.integers(28, 31),
        st.integers(1, 12),
    ),
    st.text(max_size=120),
    st.text(max_size=12).map("@".__add__),
)


@pytest.mark.slow
@PROPERTY
@given(crons)
def test_any_text_is_a_cron_expression_with_a_next_run_or_refused_naming_cron(expression):
    try:
        cleaned = schedules.clean_cron(expression)
    except ValidationError as refused:
        assert list(refused.message_dict) == ["cron"]
        return
    assert len(cleaned) <= schedules.CRON_MAX_LENGTH
    assert schedules.next_run(cleaned, timezone.now()) > timezone.now()


def test_the_next_run_follows_the_cron_expression(user, settings):
    settings.TIME_ZONE = "UTC"
    now = datetime(2030, 1, 1, 10, 7, 30, tzinfo=UTC)
    schedule = schedules.schedule_create(
        user=user, template=make_template(user), cron="*/15 * * * *", now=now
    )
    assert schedule.next_run_at == datetime(2030, 1, 1, 10, 15, tzinfo=UTC)
    assert schedules.upcoming(schedule, 3) == [
        datetime(2030, 1, 1, 10, 15, tzinfo=UTC),
        datetime(2030, 1, 1, 10, 30, tzinfo=UTC),
        datetime(2030, 1, 1, 10, 45, tzinfo=UTC),
    ]
    schedules.schedule_update(schedule=schedule, enabled=False, now=now)
    assert schedule.next_run_at is None and schedules.upcoming(schedule) == []


def test_cron_is_read_in_the_configured_time_zone(user, settings):
    settings.TIME_ZONE = "Asia/Shanghai"
    now = datetime(2030, 1, 1, 0, 0, tzinfo=UTC)  # 08:00 in Shanghai
    schedule = schedules.schedule_create(
        user=user, template=make_template(user), cron="0 9 * * *", now=now
    )
    assert schedule.next_run_at == datetime(2030, 1, 1, 1, 0, tzinfo=UTC)


def test_a_due_schedule_starts_one_linked_copy_and_moves_on(user):
    schedule = due_schedule(user)
    template = schedule.template
    now = timezone.now()
    report = schedules.run_due_schedules(now=now)
    [crawl_id] = report["started"]
    run = Crawl.objects.get(pk=crawl_id)
    assert run.schedule == schedule and run.pk != template.pk
    assert run.state == CrawlState.RUNNING and run.created_by == user
    assert run.name.startswith("nightly 20")
    assert run.seeds == template.seeds and run.channel == template.channel
    for option in CRAWL_OPTIONS:
        assert getattr(run, option) == getattr(template, option), option
    assert Frontier(run.pk).stats()["requests"] == 2
    schedule.refresh_from_db()
    assert schedule.last_run_at == now
    assert schedule.next_run_at > now
    assert schedule.next_run_at == schedules.next_run("*/5 * * * *", now)
    # Not due any more: the next pass starts nothing.
    assert schedules.run_due_schedules(now=now)["started"] == []
    assert schedule.runs.count() == 1
    template.refresh_from_db()
    assert template.state == CrawlState.DRAFT


def test_two_runners_never_start_one_schedule_twice(user):
    schedule = due_schedule(user)
    now = timezone.now()
    # A second runner read the same row before the first one claimed it.
    stale = CrawlSchedule.objects.get(pk=schedule.pk)
    assert schedules.run_due_schedules(now=now)["started"]
    assert schedules._claim(stale, now) is False
    assert schedule.runs.count() == 1


def test_disabled_and_future_schedules_do_not_run(user):
    disabled = due_schedule(user)
    CrawlSchedule.objects.filter(pk=disabled.pk).update(enabled=False)
    schedules.schedule_create(user=user, template=make_template(user), cron="0 0 1 1 *")
    assert schedules.run_due_schedules()["started"] == []
    assert not Crawl.objects.filter(schedule__isnull=False).exists()


def test_a_run_that_cannot_start_is_reported_on_the_schedule(user, settings):
    from crawlhub.redis.connections import reset_pools
    from tests.support.sites import free_port

    schedule = due_schedule(user)
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    reset_pools()
    try:
        report = schedules.run_due_schedules()
    finally:
        reset_pools()
    assert report == {"started": [], "errors": 1}
    schedule.refresh_from_db()
    assert "Error" in schedule.last_error or "connect" in schedule.last_error.lower()
    assert not schedule.last_error[:1].isdigit(), "its time is last_run_at, shown in the one style"
    assert schedule.last_run_at is not None
    assert schedule.next_run_at > timezone.now(), "a failed run does not repeat every pass"


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_real_worker_runs_the_periodic_job(user):
    schedule = due_schedule(user)
    django_rq.get_queue("control").enqueue(schedules.run_due_schedules_job)
    processes.run(
        [sys.executable, "manage.py", "rqworker", "control", "--burst"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": database_url()},
        check=True,
        timeout=120,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    [run] = schedule.runs.all()
    assert run.state == CrawlState.RUNNING
    # The run's own slices were put on the crawls queue by the worker, after its commit.
    assert django_rq.get_queue("crawls").count == run.slices


def finished_cron_passes(redis, name: str, *, at_least: int, timeout: float) -> list[Job]:
    """The finished jobs that RQ's cron scheduler enqueued for the periodic job `name`."""
    deadline = time.monotonic() + timeout
    while True:
        jobs = Job.fetch_many(get_cron_job_ids(name, redis), connection=redis)
        done = [job for job in jobs if job is not None and job.is_finished]
        if len(done) >= at_least:
            return done
        assert time.monotonic() < deadline, f"{len(done)} {name!r} cron passes finished"
        time.sleep(0.2)


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_rq_cron_starts_a_due_schedule_whose_run_crawls_the_site(user, make_site, redis):
    """Production's path: `manage.py rqcron crawlhub.cron` enqueues the schedules job, a real
    worker starts the run and crawls it, nothing here calls crawlhub's code in between."""
    site = make_site(
        pages_site(
            {
                "/": '<title>Home</title><a href="/a">a</a> <a href="/b">b</a>',
                "/a": '<title>A</title><a href="/c">c</a>',
                "/b": "<title>B</title>",
                "/c": "<title>C</title>",
            }
        )
    )
    template = services.crawl_create(
        user=user, name="nightly", seeds=[site.url + "/"], obey_robots=False, max_retries=0
    )
    schedule = schedules.schedule_create(user=user, template=template, cron="0 3 * * *")
    CrawlSchedule.objects.filter(pk=schedule.pk).update(
        next_run_at=timezone.now() - timedelta(seconds=1)
    )
    fleet = WorkerFleet(
        env={
            "CRAWLHUB_SCHEDULES_SECONDS": "1",
            "CRAWLHUB_SUPERVISOR_SECONDS": "1",
            "CRAWLHUB_SLICE_SECONDS": "3",
        }
    )
    try:
        fleet.start_worker()
        fleet.start_cron()
        deadline = time.monotonic() + 90  # the worker and rqcron start Django first
        while not schedule.runs.exists():
            assert fleet.cron.poll() is None, f"rqcron exited {fleet.cron.returncode}"
            assert time.monotonic() < deadline, "rq cron started no run of the due schedule"
            time.sleep(0.2)
        run = wait_for_state(
            schedule.runs.get(), {CrawlState.FINISHED, CrawlState.FAILED}, timeout=60
        )
        passes = finished_cron_passes(redis, "scheduled crawls", at_least=3, timeout=30)
    finally:
        fleet.stop()
    started = [job.return_value()["started"] for job in passes]
    assert sorted(started) == [[]] * (len(passes) - 1) + [[run.pk]], (
        f"one cron pass starts the run, the later ones nothing: {started}"
    )
    assert schedule.runs.count() == 1
    assert run.state == CrawlState.FINISHED, f"the run ended {run.state}: {run.error}"
    assert sorted(fetched_paths(run)) == ["/", "/a", "/b", "/c"]
    assert run.stats["responses"] == 4 and run.stats["errors"] == 0
    assert set(run.pages.values_list("title", flat=True)) == {"Home", "A", "B", "C"}
    schedule.refresh_from_db()
    assert schedule.last_run_at is not None and schedule.last_error == ""
    assert schedule.next_run_at > timezone.now()
    template.refresh_from_db()
    assert template.state == CrawlState.DRAFT and not template.pages.exists()


def test_the_periodic_jobs_are_registered_with_rq_cron(redis):
    from rq.cron import CronScheduler

    scheduler = CronScheduler(connection=redis)
    scheduler.load_config_from_file("crawlhub.cron")
    jobs = {job.name: job for job in scheduler.get_jobs()}
    assert jobs["scheduled crawls"].func is schedules.run_due_schedules_job
    assert jobs["scheduled crawls"].queue_name == "control"
    assert jobs["scheduled crawls"].interval == 30
    assert "webhook retries" in jobs
    assert jobs["alert e-mail retries"].func is alert_checks.send_overdue_mail_job


# --- Pages ------------------------------------------------------------------------------------


def test_a_schedule_is_made_and_shown_on_its_pages(user, user_client):
    template = make_template(user)
    form = user_client.get(f"/schedules/new/?template={template.pk}")
    assert form.status_code == 200
    bad = user_client.post("/schedules/new/", {"template": template.pk, "cron": "61 * * * *"})
    assert bad.status_code == 400
    assert "is not a cron expression" in bad.content.decode()
    made = user_client.post(
        "/schedules/new/", {"template": template.pk, "cron": "0 3 * * *", "enabled": "on"}
    )
    schedule = CrawlSchedule.objects.get()
    assert made.status_code == 302 and made["Location"] == f"/schedules/{schedule.pk}/"
    detail = user_client.get(made["Location"]).content.decode()
    assert "0 3 * * *" in detail and 'id="upcoming"' in detail
    assert "nightly" in user_client.get("/schedules/").content.decode()
    crawl_page = user_client.get(template.get_absolute_url()).content.decode()
    assert f"/schedules/{schedule.pk}/" in crawl_page and "next run" in crawl_page
    run = user_client.post(made["Location"], {"action": "run"})
    assert run.status_code == 302
    [crawl] = schedule.runs.all()
    assert crawl.name in user_client.get(made["Location"]).content.decode()


def test_the_schedule_pages_say_why_a_cron_expression_never_runs(user, user_client):
    template = make_template(user)
    new = user_client.post(
        "/schedules/new/", {"template": template.pk, "cron": "0 0 31 2 *", "enabled": "on"}
    )
    assert new.status_code == 400
    assert "never runs: no date has that day in that month" in new.content.decode()
    assert not CrawlSchedule.objects.exists()
    schedule = schedules.schedule_create(user=user, template=template, cron="0 3 * * *")
    for cron in ("0 0 30 2 *", "0 " * 100):
        changed = user_client.post(
            f"/schedules/{schedule.pk}/",
            {"action": "update", "cron": cron, "enabled": "on"},
            follow=True,
        )
        assert changed.status_code == 200
        shown = [str(m) for m in changed.context["messages"]]
        assert len(shown) == 1 and ("never runs" in shown[0] or "At most 100" in shown[0])
    schedule.refresh_from_db()
    assert schedule.cron == "0 3 * * *"


@pytest.mark.slow
@settings(PROPERTY, max_examples=60)
@given(cron=crons)
def test_the_new_schedule_form_answers_any_cron_with_a_schedule_or_its_error(user, cron):
    client = Client()
    client.force_login(user)
    template = Crawl.objects.filter(name="nightly").first() or make_template(user)
    page = client.post("/schedules/new/", {"template": template.pk, "cron": cron, "enabled": "on"})
    assert page.status_code in (302, 400), cron
    if page.status_code == 400:
        assert page.context["form"].errors["cron"]


def test_another_users_schedule_is_404(user, other_user, client):
    schedule = due_schedule(other_user)
    client.force_login(user)
    assert client.get(f"/schedules/{schedule.pk}/").status_code == 404
    assert client.post(f"/schedules/{schedule.pk}/", {"action": "run"}).status_code == 404
    assert not schedule.runs.exists()
    bad = client.post("/schedules/new/", {"template": schedule.template.pk, "cron": "0 3 * * *"})
    assert bad.status_code == 400 and CrawlSchedule.objects.count() == 1
