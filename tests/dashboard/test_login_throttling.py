"""Login throttling: after CRAWLHUB_LOGIN_FAILURES wrong passwords for one username from one
address, that username is refused from that address, the right password too, with a message
saying when to try again; other users, other addresses and API tokens go on working."""

from __future__ import annotations

import re
import time
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient, Client

from tests.support.clients import PASSWORD, bearer

pytestmark = pytest.mark.django_db

WRONG = "not the password"
LIMIT = 5  # CRAWLHUB_LOGIN_FAILURES, by default
LOCKED = re.compile(
    r"Too many failed logins for “alice” from your address\. Try again in (\d+) minutes?, "
    r'after <time datetime="[^"]+\+00:00" title="([^"]+)">\2</time>\.'
)


def log_in(client: Client, password: str, *, username: str = "alice", **extra):
    return client.post("/login/", {"username": username, "password": password}, **extra)


def signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def fail_until_locked(client: Client, **extra) -> list[int]:
    """Wrong passwords, as many as the limit allows; the status of each answer."""
    return [log_in(client, WRONG, **extra).status_code for _ in range(LIMIT)]


def test_after_the_limit_the_right_password_is_refused_with_when_to_try_again(user, client):
    statuses = fail_until_locked(client)
    assert statuses == [200, 200, 200, 200, 429]
    refused = log_in(client, PASSWORD)
    assert refused.status_code == 429 and not signed_in(client)
    page = refused.content.decode()
    found = LOCKED.search(page)
    assert found, page
    assert found.group(1) == "15"
    assert 14 * 60 < int(refused["Retry-After"]) <= 15 * 60
    assert 'name="password"' in page and PASSWORD not in page  # the form, empty, to try later
    # Refused attempts do not push the end back.
    for _ in range(10):
        assert log_in(client, WRONG).status_code == 429
    assert int(log_in(client, PASSWORD)["Retry-After"]) <= int(refused["Retry-After"])


def test_the_lockout_is_for_that_username_from_that_address_only(
    user, other_user, client, user_client
):
    fail_until_locked(client)
    assert log_in(client, PASSWORD).status_code == 429
    # Bob, from the same address, logs in.
    bob = Client()
    assert log_in(bob, PASSWORD, username="bob").status_code == 302 and signed_in(bob)
    # Alice, from another address, logs in.
    elsewhere = Client(REMOTE_ADDR="10.1.2.3")
    assert log_in(elsewhere, PASSWORD).status_code == 302 and signed_in(elsewhere)
    # Her API token and her session started before go on working.
    assert Client().get("/api/crawls/", **bearer(user)).status_code == 200
    assert user_client.get("/").status_code == 200


def test_the_admins_login_is_throttled_too(staff):
    client = Client()
    for _ in range(LIMIT):
        client.post("/admin/login/", {"username": "sam", "password": WRONG})
    refused = client.post("/admin/login/", {"username": "sam", "password": PASSWORD})
    assert refused.status_code == 429 and not signed_in(client)
    assert "Too many failed logins for “sam”" in refused.content.decode()


@pytest.mark.django_db(transaction=True)
def test_under_asgi_a_locked_out_login_gets_the_same_answer(user):
    """daphne runs the middleware on its async path, where django-axes calls us differently."""

    async def attempts() -> list:
        client = AsyncClient()
        answers = []
        for password in [WRONG] * LIMIT + [PASSWORD]:
            response = await client.post("/login/", {"username": "alice", "password": password})
            answers.append((response.status_code, response.content.decode()))
        return answers

    answers = async_to_sync(attempts)()
    assert [status for status, _ in answers] == [200, 200, 200, 200, 429, 429]
    assert LOCKED.search(answers[-1][1])


@pytest.mark.slow
def test_after_the_cool_off_the_right_password_works_again(user, client, settings):
    settings.AXES_COOLOFF_TIME = timedelta(seconds=2)
    fail_until_locked(client)
    locked_at = time.monotonic()
    assert log_in(client, PASSWORD).status_code == 429
    deadline = locked_at + 30
    while (response := log_in(client, PASSWORD)).status_code == 429:
        assert time.monotonic() < deadline, "still locked out 30 s after a 2 s cool-off"
        time.sleep(0.1)
    assert time.monotonic() - locked_at >= 1.5, "let in before the cool-off was over"
    assert response.status_code == 302 and signed_in(client)
    # A success starts the count again: one wrong password is just that.
    client.logout()
    assert log_in(client, WRONG).status_code == 200
