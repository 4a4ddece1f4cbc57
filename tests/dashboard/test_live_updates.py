"""Live pages over websockets: who may connect, the snapshot on connect, what workers and
services publish, the cross-process throttle, and the data the snapshots carry (queue size per
host, the pages/s series)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import connection

from crawlhub.web.consumers import CLOSE_FORBIDDEN
from crawls import consumers, services
from crawls.engine import jobs, live
from crawls.engine.frontier import Frontier
from crawls.engine.request import Outcome, Request
from proxies import pool
from proxies import services as proxy_services
from proxies.models import Proxy
from tests.support import processes
from tests.support.clients import session_cookie, ws_connect
from tests.support.crawling import ROOT, database_url
from tests.support.publish_slots import check_slots, record_slots, wait_until_free


async def connect(path: str, client=None) -> tuple[WebsocketCommunicator, bool, int | None]:
    return await ws_connect(path, session_cookie(client) if client is not None else "")


async def receive(communicator: WebsocketCommunicator, timeout: float = 5) -> dict:
    """The next message; AssertionError after `timeout` s. (A timeout in receive_from would
    cancel the consumer; receive_nothing polls without that.)"""
    deadline = time.monotonic() + timeout
    while await communicator.receive_nothing(timeout=0.02):
        assert time.monotonic() < deadline, f"no message within {timeout} s"
    return json.loads(await communicator.receive_from())


async def drain(communicator: WebsocketCommunicator, seconds: float) -> list[dict]:
    """Every message that arrives within `seconds`."""
    messages, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not await communicator.receive_nothing(timeout=0.02):
            messages.append(json.loads(await communicator.receive_from()))
    return messages


def started_crawl(user, seeds=("http://a.test/", "http://a.test/2", "http://b.test/")):
    crawl = services.crawl_create(user=user, name="live", seeds=list(seeds), max_pages=100)
    services.crawl_start(crawl=crawl, user=user)
    return crawl


# Who may connect


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["/ws/crawls/", "/ws/crawls/1/", "/ws/proxies/"])
async def test_anonymous_users_are_closed(path):
    communicator, connected, code = await connect(path)
    assert not connected and code == CLOSE_FORBIDDEN


@pytest.mark.django_db(transaction=True)
async def test_a_non_staff_user_gets_no_proxy_health(user_client):
    communicator, connected, code = await connect("/ws/proxies/", user_client)
    assert not connected and code == CLOSE_FORBIDDEN


@pytest.mark.django_db(transaction=True)
async def test_a_crawl_that_does_not_exist_is_closed(user_client):
    communicator, connected, code = await connect("/ws/crawls/999/", user_client)
    if connected:  # accepted, then closed once the crawl was not found
        assert (await communicator.receive_output(timeout=5))["type"] == "websocket.close"
    else:
        assert code == CLOSE_FORBIDDEN


# Snapshots


@pytest.mark.django_db(transaction=True)
async def test_the_crawl_page_gets_the_current_snapshot_on_connect(user, user_client):
    crawl = await sync_to_async(started_crawl)(user)
    communicator, connected, _ = await connect(f"/ws/crawls/{crawl.pk}/", user_client)
    assert connected
    first = await receive(communicator)
    assert first["type"] == "crawl.stats" and first["id"] == crawl.pk
    assert first["state"] == "running" and first["actions"] == ["pause", "cancel"]
    assert first["stats"]["requests"] == 3 and first["stats"]["queued"] == 3
    assert first["hosts"] == [["a.test", 2], ["b.test", 1]]
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
async def test_a_published_snapshot_reaches_the_page_and_the_list(user, user_client):
    crawl = await sync_to_async(started_crawl)(user)
    page, _, _ = await connect(f"/ws/crawls/{crawl.pk}/", user_client)
    listing, connected, _ = await connect("/ws/crawls/", user_client)
    assert connected
    await receive(page)  # the one on connect
    assert (await receive(listing))["on_connect"] is True
    # A slice completes a page, as a worker would, then publishes.
    frontier = Frontier(crawl.pk)
    [claimed] = await sync_to_async(frontier.claim)(1, lease_seconds=30)
    await sync_to_async(frontier.complete)([Outcome(claimed, "done", status=200, nbytes=10)])
    sent = await sync_to_async(live.publish_crawl)(crawl.pk, force=True)
    assert sent is True
    pushed = await receive(page)
    assert pushed["stats"]["responses"] == 1 and pushed["stats"]["status_2xx"] == 1
    assert pushed["stats"]["bytes"] == 10
    row = await receive(listing)
    assert row["id"] == crawl.pk and row["stats"]["responses"] == 1
    assert set(row["stats"]) == set(live.LIST_COUNTERS)
    await page.disconnect()
    await listing.disconnect()


@pytest.mark.django_db
def test_the_list_rows_on_connect_are_read_in_one_redis_round_trip(user, redis):
    crawls = [started_crawl(user, seeds=[f"http://{n}.test/"]) for n in range(5)]

    def transactions() -> int:
        return int(redis.info("commandstats").get("cmdstat_exec", {}).get("calls", 0))

    before = transactions()
    rows = consumers._list_snapshots(user)
    assert transactions() - before == 1
    assert [row["id"] for row in rows] == [crawl.pk for crawl in reversed(crawls)]
    for row, crawl in zip(rows, reversed(crawls), strict=True):
        alone = live.compact(live.snapshot(crawl, points=live.RATE_WINDOW_SECONDS + 1))
        assert {**row, "at": 0} == {**alone, "at": 0, "on_connect": True}


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
async def test_the_list_gets_the_crawls_that_can_change_on_connect(
    user, other_user, user_client, staff_client, monkeypatch
):
    running = await sync_to_async(started_crawl)(user)
    draft = await sync_to_async(services.crawl_create)(
        user=user, name="draft", seeds=["http://d.test/"]
    )
    cancelled = await sync_to_async(started_crawl)(user, seeds=["http://e.test/"])
    await sync_to_async(services.crawl_cancel)(crawl=cancelled, user=user)
    bobs = await sync_to_async(started_crawl)(other_user, seeds=["http://f.test/"])

    listing, connected, _ = await connect("/ws/crawls/", user_client)
    assert connected
    rows = {row["id"]: row for row in await drain(listing, 0.5)}
    assert set(rows) == {running.pk, draft.pk}  # not the cancelled one, not bob's
    assert rows[running.pk]["state"] == "running" and rows[running.pk]["on_connect"] is True
    assert rows[running.pk]["stats"] == {
        **dict.fromkeys(live.LIST_COUNTERS, 0),
        "requests": 3,
        "queued": 3,
    }
    assert rows[draft.pk]["actions"] == ["start"]
    full = await sync_to_async(live.snapshot)(running)
    assert set(rows[running.pk]) == set(live.compact(full)) | {"on_connect"}
    await listing.disconnect()

    staffs, _, _ = await connect("/ws/crawls/", staff_client)
    assert {row["id"] for row in await drain(staffs, 0.5)} == {running.pk, draft.pk, bobs.pk}
    await staffs.disconnect()

    # Capped, newest first.
    monkeypatch.setattr(consumers, "LIST_SNAPSHOTS", 2)
    capped, _, _ = await connect("/ws/crawls/", staff_client)
    assert [row["id"] for row in await drain(capped, 0.5)] == [bobs.pk, draft.pk]
    await capped.disconnect()


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
async def test_the_list_relays_a_crawl_only_to_its_owner_and_staff(
    user, user_client, other_client, staff_client
):
    crawl = await sync_to_async(started_crawl)(user)
    sockets = {}
    for name, client in (("alice", user_client), ("bob", other_client), ("staff", staff_client)):
        sockets[name], connected, _ = await connect("/ws/crawls/", client)
        assert connected, name
    on_connect = {name: await drain(ws, 0.5) for name, ws in sockets.items()}
    assert on_connect["bob"] == []
    await asyncio.sleep(0.3)  # the start's publish slot is free again
    assert await sync_to_async(live.publish_crawl)(crawl.pk) is True
    assert (await receive(sockets["alice"]))["id"] == crawl.pk
    assert (await receive(sockets["staff"]))["id"] == crawl.pk
    assert await drain(sockets["bob"], 1.0) == []
    for ws in sockets.values():
        await ws.disconnect()


def _end_slices(crawl_id: int, *, threads: int, seconds: float) -> None:
    """`threads` slices of one crawl ending over and over for `seconds`, as workers would."""

    def slices() -> None:
        deadline = time.monotonic() + seconds
        try:
            while time.monotonic() < deadline:
                jobs.after_slice(crawl_id)
                time.sleep(0.02)
        finally:
            connection.close()

    running = [threading.Thread(target=slices) for _ in range(threads)]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join()


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
async def test_slice_ends_are_throttled_and_the_last_counters_still_get_out(user, user_client):
    crawl = await sync_to_async(started_crawl)(user)
    page, _, _ = await connect(f"/ws/crawls/{crawl.pk}/", user_client)
    await receive(page)
    await sync_to_async(wait_until_free)(crawl.pk)  # the start's slot is over
    with record_slots() as attempts:
        await sync_to_async(_end_slices, thread_sensitive=False)(crawl.pk, threads=6, seconds=1.5)
    # By Redis' clock: one slot per 250 ms, and a slice end refused one waited for the next
    # (none was refused once the last slot was over), so more than one went out.
    slots = check_slots(attempts, period_ms=live.PUBLISH_EVERY_MS)
    assert len(slots) >= 2, attempts
    # Each slot sent one snapshot, and each reached the page.
    for _ in slots:
        assert (await receive(page))["id"] == crawl.pk
    assert await drain(page, 0.3) == []

    # The slot is taken when a slice ends with new counters: they go out just after.
    frontier = Frontier(crawl.pk)
    await sync_to_async(wait_until_free)(crawl.pk)
    assert await sync_to_async(live.publish_crawl)(crawl.pk) is True
    before = await receive(page)
    [claimed] = await sync_to_async(frontier.claim)(1, lease_seconds=30)
    await sync_to_async(frontier.complete)([Outcome(claimed, "done", status=200)])
    await sync_to_async(jobs.after_slice)(crawl.pk)
    last = await receive(page)
    assert last["stats"]["responses"] == 1 and before["stats"]["responses"] == 0
    await page.disconnect()


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
async def test_a_state_change_gets_through_a_taken_publish_slot(user, user_client):
    crawl = await sync_to_async(started_crawl)(user)
    page, _, _ = await connect(f"/ws/crawls/{crawl.pk}/", user_client)
    await receive(page)
    await drain(page, 0.3)
    # Someone holds the slot for 10 s: slice ends and added seeds wait it out, then give up...
    assert await sync_to_async(Frontier(crawl.pk).publish_slot)(10_000) is True
    await sync_to_async(jobs.after_slice)(crawl.pk)
    await sync_to_async(services.crawl_add_seeds)(crawl=crawl, urls=["http://g.test/"], user=user)
    assert await drain(page, 0.5) == []
    # ...a state change does not.
    await sync_to_async(services.crawl_pause)(crawl=crawl, user=user)
    paused = await receive(page, timeout=1)
    assert paused["state"] in ("pausing", "paused") and paused["stats"]["requests"] == 4
    await page.disconnect()


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
async def test_every_state_change_is_pushed_without_a_worker(user, user_client):
    crawl = await sync_to_async(started_crawl)(user)
    page, _, _ = await connect(f"/ws/crawls/{crawl.pk}/", user_client)
    await receive(page)
    # Throttled publishes are refused for a moment...
    await sync_to_async(live.publish_crawl)(crawl.pk)
    await drain(page, 0.1)
    # ...but a state change always goes out (on commit, from the service).
    await sync_to_async(services.crawl_pause)(crawl=crawl, user=user)
    states = [m["state"] for m in await drain(page, 1.0)]
    assert states and states[-1] == "paused"
    await sync_to_async(services.crawl_resume)(crawl=crawl, user=user)
    assert (await receive(page))["state"] == "running"
    await sync_to_async(services.crawl_cancel)(crawl=crawl, user=user)
    cancelled = await receive(page)
    assert cancelled["state"] == "cancelled" and cancelled["actions"] == []
    assert cancelled["finished_at"] is not None
    await page.disconnect()


def test_publishing_is_throttled_to_four_a_second_per_crawl_in_one_process(user, db):
    crawl = started_crawl(user)
    started = time.monotonic()
    sent = [live.publish_crawl(crawl.pk) for _ in range(50)]
    # One a quarter second: the 50 calls take milliseconds, or longer on a busy machine.
    slots = 1 + int((time.monotonic() - started) / 0.25)
    assert sent[0] is True and 1 <= sent.count(True) <= slots < 50
    time.sleep(0.3)
    assert live.publish_crawl(crawl.pk) is True
    # Another crawl has its own slot.
    other = started_crawl(user, seeds=["http://c.test/"])
    assert live.publish_crawl(other.pk) is True


PUBLISHER = """
import json, os, sys, time
import django
os.environ["DJANGO_SETTINGS_MODULE"] = "crawlhub.settings"
django.setup()
from crawls.engine.live import publish_crawl
from tests.support.publish_slots import record_slots
print("ready", flush=True)
start = float(sys.stdin.readline())
while time.time() < start:
    time.sleep(0.005)
sent = 0
with record_slots() as attempts:
    while time.time() < start + 2.0:
        sent += publish_crawl(int(sys.argv[1]))
        time.sleep(0.002)
print(json.dumps({"sent": sent, "attempts": attempts}), flush=True)
"""


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
async def test_the_throttle_holds_across_two_publishing_processes(user, user_client, redis_server):
    crawl = await sync_to_async(started_crawl)(user)
    page, _, _ = await connect(f"/ws/crawls/{crawl.pk}/", user_client)
    await receive(page)
    env = {
        **os.environ,
        "DATABASE_URL": await sync_to_async(database_url)(),
        "REDIS_URL": redis_server.url,
    }
    procs = [
        processes.spawn(
            [sys.executable, "-c", PUBLISHER, str(crawl.pk)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for proc in procs:  # both set up, then both publish for the same 2 s
        assert await sync_to_async(proc.stdout.readline)() == "ready\n"
    start = time.time() + 0.3
    for proc in procs:
        proc.stdin.write(f"{start}\n")
        proc.stdin.flush()
    reports = [json.loads((await sync_to_async(p.communicate)(timeout=60))[0]) for p in procs]
    # Every attempt of both, by the time Redis took or refused the slot: one slot per 250 ms
    # between them, and none refused once the last slot's 250 ms were over.
    slots = check_slots(
        [tuple(a) for r in reports for a in r["attempts"]], period_ms=live.PUBLISH_EVERY_MS
    )
    counts = [r["sent"] for r in reports]
    # Both processes had a share; in 2 s at one per 250 ms, at most 8 (9 at the edges).
    assert all(n >= 1 for n in counts) and sum(counts) <= 9, counts
    # Each slot taken sent one snapshot, and each reached the page.
    assert len(slots) == sum(counts)
    messages = [await receive(page) for _ in slots]
    assert all(m["id"] == crawl.pk for m in messages)
    assert await drain(page, 0.3) == []
    await page.disconnect()


# What snapshots carry


@pytest.mark.django_db
def test_a_snapshot_is_timed_by_when_its_counters_were_read_not_when_it_was_built(user):
    """Two processes can build their snapshots in the other order than they read the counters
    (one descheduled between the two, on a loaded machine): the pages keep the snapshot with
    the latest `at`, so `at` is the read's time, Redis' clock in the same MULTI, and a page's
    counters never go back."""
    crawl = started_crawl(user)
    frontier = Frontier(crawl.pk)
    [claimed] = frontier.claim(1, lease_seconds=30)
    older = frontier.live_view()
    frontier.complete([Outcome(claimed, "done", status=200)])
    newer = frontier.live_view()
    late, early = live._snapshot(crawl, newer), live._snapshot(crawl, older)  # built reversed
    assert (early["stats"]["responses"], late["stats"]["responses"]) == (0, 1)
    assert early["at"] < late["at"]
    assert abs(late["at"] - time.time()) < 60  # unix seconds, as the pages compare them


def queued_per_host(frontier: Frontier) -> dict[str, int]:
    """The per-host queue sizes the live page shows."""
    return frontier.live_view()["hosts"]


def test_queue_size_per_host_is_exact_through_claim_release_complete_and_cancel(db):
    frontier = Frontier(7)
    frontier.configure(max_pages=0, max_depth=-1, host_delay=0)
    frontier.set_state("running")
    frontier.add_seeds(["http://a.test/1", "http://a.test/2", "http://b.test:8080/1"])
    assert queued_per_host(frontier) == {"a.test": 2, "b.test:8080": 1}
    claimed = frontier.claim(2, lease_seconds=30)
    assert sum(queued_per_host(frontier).values()) == 1
    frontier.release(claimed[:1])
    assert sum(queued_per_host(frontier).values()) == 2
    # A page done with links: new links count for their hosts; repeats do not.
    done = Outcome(claimed[1], "done", status=200, links=["http://c.test/x", "http://a.test/1"])
    frontier.complete([done])
    queue = queued_per_host(frontier)
    assert queue.get("c.test") == 1 and sum(queue.values()) == frontier.stats()["queued"] == 3
    # Everything claimed: hosts at 0 are dropped from the hash.
    everything = frontier.claim(10, lease_seconds=30)
    assert queued_per_host(frontier) == {}
    # A retry waits in delayed (not queued), then counts again once it is due.
    frontier.complete([Outcome(everything[0], "retry", retry_delay=0)])
    assert queued_per_host(frontier) == {}
    frontier.claim(0, lease_seconds=30)  # nothing asked: no change
    frontier.requeue_expired()
    time.sleep(0.01)
    again = frontier.claim(10, lease_seconds=30)
    assert len(again) == 1 and queued_per_host(frontier) == {}
    frontier.release(again + everything[1:])
    assert sum(queued_per_host(frontier).values()) == frontier.stats()["queued"] == 3
    frontier.cancel()
    assert queued_per_host(frontier) == {}


def test_queue_size_per_host_matches_the_queue_with_a_host_delay(db):
    frontier = Frontier(8)
    frontier.configure(max_pages=0, max_depth=-1, host_delay=0.05)
    frontier.set_state("running")
    urls = [f"http://h{n % 3}.test/{n}" for n in range(30)]
    frontier.add_seeds(urls)
    for _ in range(5):
        for request in frontier.claim(5, lease_seconds=30):  # one per host: each is reserved
            frontier.send(request)  # until the host answered, as a worker says
            frontier.answered(request)
        time.sleep(0.06)
    queue = queued_per_host(frontier)
    assert sum(queue.values()) == frontier.stats()["queued"] == 30 - 15
    assert queue == {"h0.test": 5, "h1.test": 5, "h2.test": 5}


def test_expired_leases_and_retried_failures_count_again(db):
    frontier = Frontier(9)
    frontier.configure(max_pages=0, max_depth=-1, host_delay=0)
    frontier.set_state("running")
    frontier.add_seeds(["http://a.test/1", "http://a.test/2"])
    first, second = frontier.claim(2, lease_seconds=0.01)
    time.sleep(0.05)
    assert frontier.requeue_expired() == 2
    assert queued_per_host(frontier) == {"a.test": 2}
    first, second = frontier.claim(2, lease_seconds=30)
    frontier.complete([Outcome(first, "failed")])
    assert frontier.retry_failed([Request(url=first.url)]) == 1
    assert queued_per_host(frontier) == {"a.test": 1}


@pytest.mark.slow
def test_the_series_gets_one_point_a_second_and_gives_a_rate(db):
    frontier = Frontier(10)
    for _ in range(5):  # two records within one second of Redis' clock (a busy run straddled)
        frontier.redis.delete(frontier.key("series"))
        while frontier.now_ms() % 1000 > 500:
            time.sleep(0.02)
        second = frontier.now_ms() // 1000
        frontier.live_view(record=True)
        view = frontier.live_view(record=True)
        if frontier.now_ms() // 1000 == second:
            break
    assert len(view["series"]) == 1 and view["series"][0] == (second, 0)
    time.sleep(1.05)
    frontier.redis.hincrby(frontier.key("stats"), "responses", 42)
    view = frontier.live_view(record=True)
    assert [n for _, n in view["series"]] == [0, 42]
    assert len(frontier.live_view(points=1)["series"]) == 1
    assert live.rate([(100, 0), (101, 10), (102, 30)]) == 15.0
    assert live.rate([(100, 0), (103, 30), (105, 50), (110, 100)]) == 10.0
    assert live.rate([(100, 5)]) == 0.0


# The Proxies page


def pooled_proxy(n: int) -> Proxy:
    proxy = Proxy.objects.create(scheme="http", host=f"10.0.0.{n}", port=80, state="active")
    pool.record_check(proxy=proxy.key, url=proxy.url, ok=True, latency_ms=100 + n)
    return proxy


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
async def test_staff_see_pool_health_change_when_a_proxy_is_removed(staff, staff_client):
    proxies = [await sync_to_async(pooled_proxy)(n) for n in (1, 2, 3)]
    page, connected, _ = await connect("/ws/proxies/", staff_client)
    assert connected
    first = await receive(page)
    assert first["type"] == "proxies.health" and first["pooled"] == 3
    assert first["inventory"] == {
        "known": 3,
        "new": 0,
        "unchecked": 0,
        "failing": 0,
        "active": 3,
        "disabled": 0,
        "removed": 0,
    }
    assert sum(n for _, n in first["score_histogram"]) == 3
    assert first["removed_last_hour"] == 0 and first["last_validated_age_s"] < 5
    await sync_to_async(proxy_services.remove_proxies)(proxies=proxies[:1], why="test", user=staff)
    pushed = await receive(page, timeout=1.5)  # sooner than the periodic re-send
    assert pushed["pooled"] == 2 and pushed["inventory"]["removed"] == 1
    assert pushed["removed_last_hour"] == 1
    # Checked-out counts move without any inventory change: the periodic re-send shows them.
    lease = await sync_to_async(pool.acquire)(channel="news")
    assert lease is not None
    later = await drain(page, 2.5)
    assert later and later[-1]["channels"]["news"]["leased"] == 1
    await page.disconnect()


def test_the_score_histogram_bins_every_score():
    bins = pool.score_histogram([0, 1.5, 5, 6, 6.5, 10, 25])
    assert dict(bins) == {
        "0-2": 2,
        "2-4": 0,
        "4-6": 1,
        "6-8": 2,
        "8-10": 0,
        "10-15": 1,
        "15-20": 0,
        "20+": 1,
    }
