"""Administering proxies: the Proxies page, the Django admin, the CLI and /ws/proxies/.
Only staff see or change proxies; removal takes effect in Redis at once and is audit-logged."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import django_rq
import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from proxies import pool, services
from proxies.health import health_snapshot
from proxies.models import Proxy, ProxyEvent, ProxyState
from tests.support.clients import session_cookie, ws_connect

pytestmark = pytest.mark.django_db


def pooled(address: str, **fields) -> Proxy:
    host, port = address.rsplit(":", 1)
    proxy = Proxy.objects.create(host=host, port=int(port), state=ProxyState.ACTIVE, **fields)
    pool.record_check(proxy=proxy.key, url=proxy.url, ok=True, latency_ms=100)
    return proxy


def test_only_staff_see_the_proxy_pages(user_client, staff_client):
    proxy = pooled("10.0.0.1:80")
    for path in ("/proxies/", f"/proxies/{proxy.pk}/", "/proxies/import"):
        assert user_client.get(path).status_code == 403, path
        assert staff_client.get(path).status_code == 200, path
    refused = user_client.post(
        "/proxies/action", {"action": "remove", "ids": [proxy.pk], "why": "x"}
    )
    assert refused.status_code == 403
    assert proxy.key in pool.members()


def test_non_staff_cannot_open_the_admin(user_client):
    assert user_client.get("/admin/proxies/proxy/").status_code == 302


def test_removing_from_the_page_takes_effect_in_redis_at_once_and_is_audited(staff, staff_client):
    proxy = pooled("10.0.0.1:80")
    lease = pool.acquire(channel="c")
    response = staff_client.post(
        "/proxies/action", {"action": "remove", "ids": [proxy.pk], "why": "bans everywhere"}
    )
    assert response.status_code == 302
    assert proxy.key not in pool.members()
    pool.release(lease=lease, latency_ms=1)  # a late release does not bring it back
    assert pool.acquire(channel="c") is None
    proxy.refresh_from_db()
    assert (proxy.state, proxy.removed_by, proxy.removed_why) == (
        "removed",
        staff,
        "bans everywhere",
    )
    event = proxy.events.get(kind=ProxyEvent.Kind.REMOVED)
    assert (event.user, event.detail) == (staff, "bans everywhere")
    assert "bans everywhere" in staff_client.get(f"/proxies/{proxy.pk}/").content.decode()


def test_removing_needs_a_reason(staff_client):
    proxy = pooled("10.0.0.1:80")
    staff_client.post("/proxies/action", {"action": "remove", "ids": [proxy.pk], "why": " "})
    proxy.refresh_from_db()
    assert proxy.state == ProxyState.ACTIVE


def test_disable_enable_and_validate_now_from_the_page(
    staff_client, django_capture_on_commit_callbacks
):
    proxy = pooled("10.0.0.1:80")
    staff_client.post("/proxies/action", {"action": "disable", "ids": [proxy.pk]})
    proxy.refresh_from_db()
    assert proxy.state == ProxyState.DISABLED and pool.members() == {}
    with django_capture_on_commit_callbacks(execute=True):
        staff_client.post("/proxies/action", {"action": "enable", "ids": [proxy.pk]})
        staff_client.post("/proxies/action", {"action": "validate", "ids": [proxy.pk]})
    proxy.refresh_from_db()
    assert proxy.state == ProxyState.NEW  # validated again before it enters the pools
    jobs = django_rq.get_queue("control").get_jobs()
    assert [j.kwargs for j in jobs] == [{"proxy_ids": [proxy.pk]}] * 2
    assert [e.kind for e in proxy.events.order_by("at", "id")] == ["disabled", "enabled"]


def test_the_list_filters_and_sorts(staff_client, settings):
    settings.PROXY_CHANNEL_SIZE = 1
    fast = pooled("10.0.0.1:80", score=12, latency_ms=50, anonymity="elite", source="vendor-a")
    slow = pooled(
        "10.0.0.2:80",
        score=5.5,
        latency_ms=900,
        anonymity="transparent",
        source="vendor-b",
        failures=7,
    )
    gone = Proxy.objects.create(host="10.0.0.3", port=80, state=ProxyState.REMOVED)
    pool.release(lease=pool.acquire(channel="shop"), latency_ms=5)

    def shown(query: str) -> list[str]:
        page = staff_client.get("/proxies/?" + query).content.decode()
        return [p.host for p in (fast, slow, gone) if f"{p.host}:80" in page]

    assert shown("") == ["10.0.0.1", "10.0.0.2"]
    assert shown("state=removed") == ["10.0.0.3"]
    assert shown("score=10%2B") == ["10.0.0.1"]
    assert shown("score=5-6") == ["10.0.0.2"]
    assert shown("anonymity=transparent") == ["10.0.0.2"]
    assert shown("source=vendor-a") == ["10.0.0.1"]
    assert len(shown("channel=shop")) == 1
    page = staff_client.get("/proxies/?sort=failures").content.decode()
    assert page.index("10.0.0.2:80") < page.index("10.0.0.1:80")
    page = staff_client.get("/proxies/?sort=latency").content.decode()
    assert page.index("10.0.0.1:80") < page.index("10.0.0.2:80")


def in_page_order(page: str, proxies: list[Proxy]) -> list[str]:
    """The hosts of `proxies` in the order their rows appear on `page`."""
    for proxy in proxies:
        assert f"{proxy.host}:80" in page, f"{proxy.host}:80 is not on the page"
    return [p.host for p in sorted(proxies, key=lambda p: page.index(f"{p.host}:80"))]


@pytest.fixture
def ranked() -> list[Proxy]:
    """Four proxies whose order by score, latency, last validated and id all differ."""
    now = timezone.now()
    return [
        pooled(
            "10.0.0.1:80", score=5.5, latency_ms=300, last_validated_at=now - timedelta(minutes=5)
        ),
        pooled(
            "10.0.0.2:80", score=12, latency_ms=900, last_validated_at=now - timedelta(minutes=30)
        ),
        pooled("10.0.0.3:80", score=8, latency_ms=50, last_validated_at=now - timedelta(minutes=1)),
        Proxy.objects.create(host="10.0.0.4", port=80, score=7),  # new: never validated
    ]


def test_the_page_sorts_by_score_and_by_last_validated(staff_client, ranked):
    def order(query: str) -> list[str]:
        return in_page_order(staff_client.get("/proxies/?" + query).content.decode(), ranked)

    assert order("sort=score") == ["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.1"]
    assert order("") == order("sort=score")
    # Most recently validated first; never validated last (on SQLite and PostgreSQL alike).
    assert order("sort=validated") == ["10.0.0.3", "10.0.0.1", "10.0.0.2", "10.0.0.4"]
    assert order("sort=latency") == ["10.0.0.3", "10.0.0.1", "10.0.0.2", "10.0.0.4"]


def test_the_admin_changelist_sorts_by_score_and_by_last_validated(admin_client, ranked):
    # ?o= counts list_display columns from 1: score is the 3rd, last_validated_at the 5th.
    def order(query: str, proxies: list[Proxy] = ranked) -> list[str]:
        page = admin_client.get("/admin/proxies/proxy/?" + query)
        assert page.status_code == 200, query
        return in_page_order(page.content.decode(), proxies)

    assert order("o=-3") == ["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.1"]
    assert order("o=3") == ["10.0.0.1", "10.0.0.4", "10.0.0.3", "10.0.0.2"]
    # The validated ones (where a NULL sorts differs between databases).
    active = ranked[:3]
    assert order("o=-5&state__exact=active", active) == ["10.0.0.3", "10.0.0.1", "10.0.0.2"]
    assert order("o=5&state__exact=active", active) == ["10.0.0.2", "10.0.0.1", "10.0.0.3"]


def test_the_detail_page_shows_recent_history_and_live_channels(staff, staff_client):
    proxy = pooled("10.0.0.1:80", username="u", password="topsecret")
    services.disable_proxies(proxies=[proxy], why="maintenance", user=staff)
    page = staff_client.get(f"/proxies/{proxy.pk}/").content.decode()
    assert "maintenance" in page and "sam" in page and "u:****@" in page
    assert "topsecret" not in page


def test_the_admin_lists_filters_and_never_shows_the_password(admin_client):
    pooled("10.0.0.1:80", username="u", password="topsecret", anonymity="elite")
    for query in (
        "",
        "?state__exact=active",
        "?score=6-10",
        "?anonymity__exact=elite",
        "?o=3",
        "?channel=x",
    ):
        page = admin_client.get("/admin/proxies/proxy/" + query)
        assert page.status_code == 200, query
        assert "topsecret" not in page.content.decode()
    proxy = Proxy.objects.get()
    detail = admin_client.get(f"/admin/proxies/proxy/{proxy.pk}/change/").content.decode()
    assert "u:****@" in detail and "topsecret" not in detail


def test_the_admin_remove_action_asks_why_then_removes(admin_client, admin_user):
    proxy = pooled("10.0.0.1:80")
    url = "/admin/proxies/proxy/"
    confirm = admin_client.post(url, {"action": "remove_selected", "_selected_action": [proxy.pk]})
    assert confirm.status_code == 200 and "Why" in confirm.content.decode()
    assert proxy.key in pool.members()
    done = admin_client.post(
        url,
        {
            "action": "remove_selected",
            "_selected_action": [proxy.pk],
            "apply": "1",
            "why": "abuse report",
        },
    )
    assert done.status_code == 302
    proxy.refresh_from_db()
    assert (proxy.state, proxy.removed_by, proxy.removed_why) == (
        "removed",
        admin_user,
        "abuse report",
    )
    assert proxy.key not in pool.members()


def test_the_admin_disable_enable_and_validate_actions(admin_client):
    proxy = pooled("10.0.0.1:80")
    url = "/admin/proxies/proxy/"
    admin_client.post(url, {"action": "disable_selected", "_selected_action": [proxy.pk]})
    proxy.refresh_from_db()
    assert proxy.state == ProxyState.DISABLED and proxy.key not in pool.members()
    admin_client.post(url, {"action": "enable_selected", "_selected_action": [proxy.pk]})
    proxy.refresh_from_db()
    assert proxy.state == ProxyState.NEW
    response = admin_client.post(
        url, {"action": "validate_selected", "_selected_action": [proxy.pk]}
    )
    assert response.status_code == 302


def test_the_cli_lists_as_text_and_json():
    pooled("10.0.0.1:80", username="u", password="topsecret", score=8)
    out = io.StringIO()
    call_command("proxies", "list", "--json", stdout=out)
    [row] = json.loads(out.getvalue())
    assert row["proxy"] == "http://u:****@10.0.0.1:80" and row["state"] == "active"
    out = io.StringIO()
    call_command("proxies", "list", stdout=out)
    assert "10.0.0.1:80" in out.getvalue() and "topsecret" not in out.getvalue()


def test_the_cli_removes_by_address_and_reports_unknown_ones():
    a = pooled("10.0.0.1:80")
    b = pooled("10.0.0.2:8080")
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "proxies",
        "remove",
        "10.0.0.1:80",
        "http://10.0.0.2:8080",
        "--why",
        "dead",
        stdout=out,
        stderr=err,
    )
    assert pool.members() == {}
    for proxy in (a, b):
        proxy.refresh_from_db()
        assert proxy.state == ProxyState.REMOVED and proxy.removed_why == "dead"
        assert proxy.events.get(kind="removed").actor == "cli"
    with pytest.raises(CommandError, match="1 of 1 addresses are unknown"):
        call_command("proxies", "remove", "10.9.9.9:80", stdout=out, stderr=err)


def test_the_cli_validate_says_when_another_pass_runs():
    with (
        pool.validation_lock(timeout=30),
        pytest.raises(CommandError, match="another validation pass"),
    ):
        call_command("proxies", "validate", "--all", "--wait", "0")


@pytest.mark.django_db(transaction=True)
async def test_the_proxies_websocket_sends_a_health_snapshot_to_staff_only(
    user_client, staff_client
):
    communicator, connected, _ = await ws_connect("/ws/proxies/", session_cookie(user_client))
    assert not connected
    communicator, connected, _ = await ws_connect("/ws/proxies/", session_cookie(staff_client))
    assert connected
    message = await communicator.receive_json_from(timeout=5)
    assert message["type"] == "proxies.health" and message["pooled"] == 0
    await communicator.disconnect()


def test_removing_or_disabling_many_proxies_takes_a_few_statements_not_a_few_per_proxy(
    staff, django_assert_max_num_queries
):
    proxies = [pooled(f"10.0.{n // 250}.{n % 250}:8080") for n in range(60)]
    with django_assert_max_num_queries(6):
        done = services.disable_proxies(proxies=proxies[:30], user=staff, why="batch")
    with django_assert_max_num_queries(6):
        done += services.remove_proxies(proxies=proxies[30:], user=staff, why="batch")
    assert len(done) == 60
    assert not set(pool.members()) & {p.key for p in proxies}
    states = dict(Proxy.objects.values_list("pk", "state"))
    assert {states[p.pk] for p in proxies[:30]} == {ProxyState.DISABLED}
    assert {states[p.pk] for p in proxies[30:]} == {ProxyState.REMOVED}
    events = ProxyEvent.objects.filter(detail="batch")
    assert events.filter(kind=ProxyEvent.Kind.DISABLED, user=staff).count() == 30
    assert events.filter(kind=ProxyEvent.Kind.REMOVED, user=staff).count() == 30
    removed = Proxy.objects.get(pk=proxies[-1].pk)
    assert (removed.removed_by, removed.removed_why) == (staff, "batch")
    assert removed.removed_at is not None


def test_a_proxy_that_failed_its_checks_is_not_counted_as_not_checked_yet(staff_client):
    """It read "Not checked yet" after three failed checks."""
    Proxy.objects.create(host="10.0.0.5", port=80)  # imported, never checked
    Proxy.objects.create(host="10.0.0.6", port=80, failures=3, last_error="timed out")
    inventory = health_snapshot()["inventory"]
    assert (inventory["new"], inventory["unchecked"], inventory["failing"]) == (2, 1, 1)
    page = staff_client.get("/proxies/").content.decode()
    assert 'data-h="inventory.unchecked"' in page and 'data-h="inventory.failing"' in page
    assert 'data-h="inventory.new"' not in page
    assert 'title="Checked 3 times, never passed yet">failing</span>' in page
    # And a box that selects every proxy of the page (the script shows it).
    assert 'id="select-all"' in page
