"""API tokens: made on a page, shown once, stored hashed, used as Bearer or Token, revocable."""

from __future__ import annotations

import hashlib
import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from crawlhub import tokens
from crawlhub.models import ApiToken

pytestmark = pytest.mark.django_db


def created_token(response) -> str:
    match = re.search(r'<code id="new-token">([^<]+)</code>', response.content.decode())
    assert match, "the new token is shown on the page"
    return match.group(1)


def test_the_tokens_page_needs_a_login(client):
    response = client.get("/account/tokens/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_a_token_made_on_the_page_is_shown_once_and_stored_hashed(user_client, user):
    response = user_client.post("/account/tokens/", {"name": "nightly export"})
    # POST, redirect, GET: reloading the page the token is shown on makes no second one.
    assert response.status_code == 302 and response["Location"] == "/account/tokens/"
    raw = created_token(user_client.get(response["Location"]))
    token = ApiToken.objects.get(user=user)
    assert token.name == "nightly export"
    assert token.key_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert raw not in str(ApiToken.objects.values().get())
    assert raw.startswith(token.prefix)
    again = user_client.get("/account/tokens/")
    assert raw not in again.content.decode()
    assert token.prefix in again.content.decode()


def test_a_token_needs_a_name(user_client):
    response = user_client.post("/account/tokens/", {"name": "  "})
    assert response.status_code == 400
    assert "Give the token a name" in response.content.decode()
    assert not ApiToken.objects.exists()


def test_the_page_refuses_a_post_without_csrf(user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    assert client.post("/account/tokens/", {"name": "x"}).status_code == 403
    assert not ApiToken.objects.exists()


@pytest.mark.parametrize("keyword", ["Bearer", "Token", "bearer"])
def test_a_token_authenticates_its_user_and_records_the_use(client, user, keyword):
    token, raw = tokens.token_create(user=user, name="t")
    response = client.get("/api/tokens/", HTTP_AUTHORIZATION=f"{keyword} {raw}")
    assert response.status_code == 200
    assert [t["name"] for t in response.json()["results"]] == ["t"]
    token.refresh_from_db()
    assert token.last_used_at is not None
    assert timezone.now() - token.last_used_at < timedelta(seconds=10)


def test_a_revoked_token_stops_working_at_once(client, user, user_client):
    token, raw = tokens.token_create(user=user, name="t")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    assert client.get("/api/crawls/", **auth).status_code == 200
    response = user_client.post(f"/account/tokens/{token.pk}/revoke")
    assert response.status_code == 302
    assert client.get("/api/crawls/", **auth).status_code == 401
    token.refresh_from_db()
    assert token.revoked_at is not None


def test_a_users_token_of_an_inactive_user_is_refused(client, user):
    _, raw = tokens.token_create(user=user, name="t")
    user.is_active = False
    user.save()
    assert client.get("/api/crawls/", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 401


def test_nobody_revokes_another_users_token(user, other_user):
    theirs, raw = tokens.token_create(user=other_user, name="theirs")
    client = Client()
    client.force_login(user)
    assert client.post(f"/account/tokens/{theirs.pk}/revoke").status_code == 404
    mine = {"HTTP_AUTHORIZATION": f"Bearer {tokens.token_create(user=user, name='m')[1]}"}
    assert client.delete(f"/api/tokens/{theirs.pk}/", **mine).status_code == 404
    theirs.refresh_from_db()
    assert theirs.revoked_at is None


def test_tokens_through_the_api_create_list_and_revoke(client, user):
    _, raw = tokens.token_create(user=user, name="first")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    created = client.post(
        "/api/tokens/", {"name": "second"}, content_type="application/json", **auth
    )
    assert created.status_code == 201
    new = created.json()
    assert new["token"].startswith("chk_") and new["active"] is True
    listed = client.get("/api/tokens/", **auth).json()["results"]
    assert {t["name"] for t in listed} == {"first", "second"}
    assert all("token" not in t and "key_hash" not in t for t in listed)
    assert client.delete(f"/api/tokens/{new['id']}/", **auth).status_code == 204
    second = {"HTTP_AUTHORIZATION": f"Bearer {new['token']}"}
    assert client.get("/api/tokens/", **second).status_code == 401
    bad = client.post("/api/tokens/", {}, content_type="application/json", **auth)
    assert bad.status_code == 400 and "name" in bad.json()
