"""The crawl form and the services behind it say every problem in one round: the
credentials' with the seeds' (and every login problem at once), on the new-crawl form, a
draft's edit form, the API and the services; and a draft removes its saved credentials kind by
kind, audited, never echoing a secret."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile

from crawls import services
from crawls.engine import credentials
from crawls.models import Channel, Crawl, CrawlAuth, CrawlEvent

pytestmark = pytest.mark.django_db

SEED = "https://example.com/"
SECRETS = ("hdr-SECRET-1111", "ck-SECRET-2222", "basic-SECRET-4444", "pw-SECRET-5555")
BAD_AUTH = {
    "headers": f"X-Api-Key {SECRETS[0]}",  # no colon
    "cookie": f"ck={SECRETS[1]}",
    "login_fields": f"username=alice\npassword={SECRETS[3]}",  # no login URL
}


def form_data(**changes) -> dict:
    data = {
        "name": "rounds",
        "channel": Channel.default().pk,
        "seeds": SEED,
        "max_depth": 20,
        "max_pages": 100,
        "priority": 0,
        "threads": 4,
        "slices": 1,
        "timeout": 10,
        "max_bytes": "1 MB",
        "max_retries": 1,
        "host_concurrency": 0,
    }
    data.update(changes)
    return data


def saved_draft(user) -> Crawl:
    return services.crawl_create(
        user=user,
        name="draft",
        seeds=[SEED],
        auth={
            "headers": f"X-Api-Key: {SECRETS[0]}",
            "cookie": f"ck={SECRETS[1]}",
            "basic_user": "bob",
            "basic_password": SECRETS[2],
            "login_url": SEED + "login",
            "login_fields": f"password={SECRETS[3]}",
        },
    )


def errors_of(response) -> dict:
    return response.context["form"].errors


def no_secret_in(text: str) -> bool:
    return not [secret for secret in SECRETS if secret in text]


def test_bad_seeds_and_bad_credentials_are_refused_together_by_the_service(user):
    with pytest.raises(ValidationError) as caught:
        services.crawl_create(user=user, name="x", seeds=["ftp://nope/"], auth=BAD_AUTH)
    problems = caught.value.message_dict
    assert set(problems) == {"seeds", "headers", "login_fields"}, problems
    assert "found no colon" in problems["headers"][0]
    assert "give the login URL too" in problems["login_fields"][0]
    assert no_secret_in(str(problems))
    assert Crawl.objects.count() == 0


def test_every_login_problem_comes_at_once():
    with pytest.raises(credentials.CredentialsProblems) as caught:
        credentials.parse(
            [SEED],
            {
                "headers": "no colon here",
                "login_url": "https://elsewhere.example/login",
                "login_check_selector": "a[[",
                "login_check_url": "ftp://x",
            },
        )
    assert set(caught.value.problems) == {
        "headers",
        "login_url",
        "login_fields",
        "login_check_selector",
        "login_check_url",
    }, caught.value.problems


def test_with_seeds_refused_what_depends_on_their_hosts_is_left_for_later():
    jar = "other.example\tFALSE\t/\tFALSE\t0\tn\tv\n"
    found = credentials.parse(
        None,
        {"cookies_txt": jar, "login_url": "https://elsewhere.example/login", "login_fields": "a=b"},
    )
    assert found.login_url == "https://elsewhere.example/login"
    with pytest.raises(credentials.CredentialsProblems) as caught:
        credentials.parse(
            [SEED],
            {"cookies_txt": jar, "login_url": "https://elsewhere.example/", "login_fields": "a=b"},
        )
    assert set(caught.value.problems) == {"cookies_txt", "login_url"}


def test_the_new_crawl_form_shows_seed_and_credentials_errors_in_one_round(user_client):
    jar = SimpleUploadedFile("cookies.txt", b"example.com\tFALSE\t/\n")
    response = user_client.post(
        "/crawls/new/",
        form_data(seeds="ftp://nope/", timeout="soon", cookies_txt=jar, **BAD_AUTH),
    )
    assert response.status_code == 200
    summary = response.context["form"].error_summary()
    assert [label for _, label, _ in summary] == [
        "Seeds",
        "Timeout",
        "Extra headers",
        "cookies.txt",
        "Login form fields",
    ], summary
    assert no_secret_in(response.content.decode())
    assert Crawl.objects.count() == 0


def test_the_form_posts_to_its_own_address_without_an_anchor(user_client):
    """A summary link puts #id_field on the address; an action of its own keeps the anchor off
    the POST, and so off the crawl's page it redirects to (and off the next refused round)."""
    page = user_client.post("/crawls/new/", form_data(seeds="ftp://nope/")).content.decode()
    assert 'action="/crawls/new/"' in page and 'href="#id_seeds"' in page


def test_a_draft_edit_says_unreadable_and_refused_values_in_one_round(user, user_client):
    crawl = saved_draft(user)
    response = user_client.post(
        f"/crawls/{crawl.pk}/edit/",
        form_data(
            seeds="ftp://nope/", timeout="soon", include_patterns="(unclosed", headers="no colon"
        ),
    )
    assert set(errors_of(response)) == {"seeds", "timeout", "include_patterns", "headers"}
    assert no_secret_in(response.content.decode())
    crawl.refresh_from_db()
    assert crawl.seeds == [SEED]


def test_a_draft_offers_to_remove_each_kind_of_saved_credentials_by_name(user, user_client):
    crawl = saved_draft(user)
    page = user_client.get(f"/crawls/{crawl.pk}/edit/").content.decode()
    for name, words in (
        ("headers", "extra headers (X-Api-Key)"),
        ("cookies", "cookies (ck)"),
        ("basic_auth", "basic auth (user bob)"),
        ("login", f"login step (at {SEED}login)"),
    ):
        assert f'name="remove_{name}"' in page and f"Remove the saved {words}" in page
    assert no_secret_in(page)
    fresh = services.crawl_create(user=user, name="none", seeds=[SEED])
    assert "remove_" not in user_client.get(f"/crawls/{fresh.pk}/edit/").content.decode()
    assert "remove_" not in user_client.get("/crawls/new/").content.decode()


def test_a_draft_removes_saved_credentials_kind_by_kind_audited(user, user_client):
    crawl = saved_draft(user)
    response = user_client.post(
        f"/crawls/{crawl.pk}/edit/", form_data(remove_headers="on", remove_login="on")
    )
    assert response.status_code == 302, errors_of(response)
    row = CrawlAuth.objects.get(crawl=crawl)
    assert (row.headers, row.login_url, row.login_fields) == ([], "", [])
    assert (row.basic_password, row.cookies[0]["value"]) == (SECRETS[2], SECRETS[1])
    event = crawl.events.get(kind=CrawlEvent.Kind.EDITED)
    assert "removed the saved extra headers, login step" in event.detail
    assert no_secret_in(event.detail) and event.user == user
    shown = user_client.get(f"/crawls/{crawl.pk}/").content.decode()
    assert "set (user bob, password set)" in shown and no_secret_in(shown)

    # Once the last kind goes, so does the row: the crawl has no credentials.
    services.crawl_update(
        crawl=crawl,
        user=user,
        name="draft",
        seeds=[SEED],
        remove_credentials=["cookies", "basic_auth"],
    )
    assert not CrawlAuth.objects.filter(crawl=crawl).exists()
    assert services.credentials_shown(Crawl.objects.get(pk=crawl.pk)) == {}


def test_removing_and_giving_the_same_kind_at_once_is_refused(user, user_client):
    crawl = saved_draft(user)
    response = user_client.post(
        f"/crawls/{crawl.pk}/edit/",
        form_data(remove_headers="on", headers="X-Other: new-SECRET", seeds="ftp://nope/"),
    )
    errors = errors_of(response)
    assert set(errors) == {"remove_headers", "seeds"}, errors
    assert "either give new extra headers or remove the saved ones" in errors["remove_headers"][0]
    assert "new-SECRET" not in response.content.decode()
    assert CrawlAuth.objects.get(crawl=crawl).headers == [["X-Api-Key", SECRETS[0]]]
    with pytest.raises(ValidationError) as caught:
        services.crawl_update(
            crawl=crawl,
            user=user,
            name="d",
            seeds=[SEED],
            auth={"basic_user": "eve"},
            remove_credentials=["basic_auth"],
        )
    assert "remove_basic_auth" in caught.value.message_dict


def test_the_api_says_seed_and_credentials_problems_in_one_answer(user_client):
    response = user_client.post(
        "/api/crawls/",
        {"name": "api", "seeds": ["ftp://nope/"], "auth": BAD_AUTH},
        content_type="application/json",
    )
    assert response.status_code == 400
    body = response.json()
    text = str(body)
    assert "seeds" in text and "headers" in text and "login_fields" in text, body
    assert no_secret_in(text)


def test_every_bad_allowed_domain_is_named_at_once(user):
    with pytest.raises(ValidationError) as caught:
        services.crawl_create(
            user=user, name="d", seeds=[SEED], allowed_domains="http://a.example/\nb c\nok.example"
        )
    assert len(caught.value.message_dict["allowed_domains"]) == 2


def test_a_schedule_without_a_template_and_with_a_bad_cron_says_both(user_client):
    response = user_client.post("/schedules/new/", {"template": "", "cron": "61 * * * *"})
    assert response.status_code == 400
    assert set(response.context["form"].errors) == {"template", "cron"}


def test_a_cookie_without_a_name_is_refused_without_echoing_it(user_client):
    response = user_client.post("/crawls/new/", form_data(cookie=f"a=b; {SECRETS[1]}"))
    assert "part 2" in response.context["form"].errors["cookie"][0]
    assert no_secret_in(response.content.decode())
