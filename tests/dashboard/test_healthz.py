"""/healthz reports the database, Redis and live workers, each ok or the error."""

import pytest
from rq import Worker

from crawlhub.redis.connections import get_redis
from crawls import services
from crawls.engine import live
from tests.support.crawling import use_redis


@pytest.mark.django_db
def test_healthy(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is True
    assert body["database"]["ok"] and body["redis"]["ok"]
    assert body["workers"] == {"ok": True, "count": 0}


@pytest.mark.django_db
def test_counts_live_workers(client):
    worker = Worker(["control"], connection=get_redis())
    worker.register_birth()
    try:
        assert client.get("/healthz").json()["workers"]["count"] == 1
    finally:
        worker.register_death()


@pytest.fixture
def redis_gone(redis_server):
    """Point crawlhub at a port where nothing listens, then back."""
    from tests.support.sites import free_port

    use_redis(f"redis://127.0.0.1:{free_port()}/0")
    yield
    use_redis(redis_server.url)


@pytest.mark.django_db
def test_redis_down_is_reported_not_raised(client, user, redis_gone):
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["ok"] is False
    assert body["database"]["ok"] is True
    assert body["redis"] == {"ok": False, "error": "ConnectionError"}
    client.force_login(user)
    detailed = client.get("/healthz").json()
    assert detailed["redis"]["error"].startswith("ConnectionError: ")
    assert detailed["workers"]["ok"] is False


@pytest.mark.django_db
def test_a_crawls_snapshot_without_redis_says_why_and_has_no_time_of_redis(user, redis_gone):
    crawl = services.crawl_create(user=user, name="away", seeds=["http://127.0.0.1:9/"])
    snap = live.snapshot(crawl)
    assert "Connection" in snap["stats"]["redis_error"], snap["stats"]["redis_error"]
    # The pages order snapshots by Redis' clock; this host's is another: shown as it comes.
    assert snap["at"] is None


@pytest.mark.django_db
def test_workers_page_says_redis_is_away(user_client, redis_gone):
    response = user_client.get("/workers/")
    assert response.status_code == 200
    assert b"Redis is not reachable" in response.content
