"""Fixtures shared by the whole suite: a private real Redis, local sites, named users."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable, Iterator

import pytest
from asgiref.sync import sync_to_async
from channels.layers import channel_layers
from django.conf import settings
from django.db import connections
from django.test import Client

from crawlhub import launcher
from crawlhub.connections import get_redis, reset_pools
from tests.sites import Handler, LocalSite

PASSWORD = "correct horse battery staple"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def use_redis(url: str) -> None:
    """Point crawlhub, RQ, Channels and child processes at the Redis at `url`."""
    settings.REDIS_URL = url
    for queue in settings.RQ_QUEUES.values():
        queue["URL"] = url
    settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"] = launcher.channel_layer_hosts(url)
    os.environ["REDIS_URL"] = url
    reset_pools()
    channel_layers.backends.clear()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup):
    """pytest-django's test databases; before they are dropped, close the connections that
    websocket consumers opened in asgiref's sync thread (PostgreSQL will not drop a database
    someone is still connected to)."""
    yield
    asyncio.run(sync_to_async(connections.close_all)())


@pytest.fixture(scope="session", autouse=True)
def redis_server(tmp_path_factory) -> Iterator[launcher.EmbeddedRedis]:
    """One embedded Redis for the test session, on a free loopback port."""
    server = launcher.EmbeddedRedis(tmp_path_factory.mktemp("redis"), port=free_port())
    server.start()
    use_redis(server.url)
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def redis(redis_server):
    """A Redis client; every test starts and ends with an empty Redis."""
    client = get_redis()
    client.flushall()
    yield client
    client.flushall()


@pytest.fixture
def make_site() -> Iterator[Callable[[Handler], LocalSite]]:
    """Start local HTTP sites for a test: make_site(handler) -> LocalSite (stopped after)."""
    sites: list[LocalSite] = []

    def make(handler: Handler) -> LocalSite:
        site = LocalSite(handler).start()
        sites.append(site)
        return site

    yield make
    for site in sites:
        site.stop()


@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create_user(username="alice", password=PASSWORD)


@pytest.fixture
def other_user(django_user_model):
    return django_user_model.objects.create_user(username="bob", password=PASSWORD)


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_user(username="sam", password=PASSWORD, is_staff=True)


@pytest.fixture
def user_client(user):
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def staff_client(staff):
    client = Client()
    client.force_login(staff)
    return client
