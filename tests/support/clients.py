"""How tests sign in and talk to the doors: the password of the named users, API tokens and JSON
posts, a page's own form as a browser would post it, and websockets with a session cookie."""

from __future__ import annotations

from urllib.parse import urlsplit

import lxml.html
from channels.testing import WebsocketCommunicator
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.test import Client

from crawlhub import tokens
from crawlhub.asgi import application

# The password of every named user of the suite (alice, bob, sam: see tests/conftest.py).
PASSWORD = "correct horse battery staple"


class QuickPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    """Django's PBKDF2 at 1,000 iterations instead of 1,000,000 (~0.2 s a user, and most tests
    make two or three). The hashes are still pbkdf2_sha256, which the servers tests start (daphne,
    `up`) check with their own settings."""

    iterations = 1_000


ORIGIN = "http://127.0.0.1:8000"
# A websocket's accept goes through a database read in a thread: on a busy machine that can take
# longer than WebsocketCommunicator's default second.
WS_CONNECT_SECONDS = 10


def bearer(user, name: str = "script") -> dict:
    """Headers for a Django test client call authenticated by a new API token of `user`."""
    _, raw = tokens.token_create(user=user, name=name)
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


def post(client: Client, path: str, data=None, **headers):
    """A JSON POST."""
    return client.post(path, data or {}, content_type="application/json", **headers)


def form_data(client, path: str, **overrides) -> dict:
    """The values a browser would post from the page's own form (the one posting to the page
    itself, with no action or its own address: the navigation has forms too), plus overrides."""
    response = client.get(path)
    assert response.status_code == 200, path
    forms = lxml.html.fromstring(response.content).forms
    form = next(f for f in forms if f.get("action") in (None, "", path.split("?")[0]))
    data = {k: v for k, v in form.form_values() if k != "csrfmiddlewaretoken"}
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not None}


def session_cookie(client) -> str:
    """The Cookie header of a signed-in Django test client."""
    return "; ".join(f"{k}={v.value}" for k, v in client.cookies.items())


async def ws_connect(path: str, cookies: str = "", origin: str = ORIGIN):
    """(communicator, connected, close code) for a websocket to the full ASGI app, as a
    browser opens it from a page of `origin`, to the dashboard at ORIGIN."""
    headers = [(b"host", urlsplit(ORIGIN).netloc.encode()), (b"origin", origin.encode())]
    if cookies:
        headers.append((b"cookie", cookies.encode()))
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, code = await communicator.connect(timeout=WS_CONNECT_SECONDS)
    return communicator, connected, code
