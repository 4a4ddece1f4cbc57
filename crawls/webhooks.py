"""Webhooks: a signed POST to a URL when a crawl finishes, fails or is cancelled, and when an
alert on it fires or is resolved (crawls/alert_checks.py, the "alert" event).

When a crawl's end is committed, crawls.signals.crawl_ended calls crawl_ended(). That writes one
WebhookDelivery per matching webhook (the crawl's own, its channel's and, for a run of a
schedule, those of the schedule's template crawl) and enqueues a
delivery job on the control queue. A delivery is tried up to MAX_ATTEMPTS times with BACKOFF
between tries, every attempt logged on its row, by the mechanism alert e-mails share
(crawls/deliveries.py): retries scheduled with RQ's enqueue_in, the periodic sweep
deliver_overdue() for those the scheduler missed, and a conditional UPDATE that claims each
attempt, so two jobs for one delivery never both send it.

Each POST goes through the HTTP kit's client (crawlhub/http): it refuses private networks when
CRAWLHUB_BLOCK_PRIVATE_NETWORKS is on, follows no redirect (a 3xx is an answer like any other
non-2xx) and reads at most SNIPPET_BYTES of the answer.

The receiver checks `X-Crawlhub-Signature: sha256=<hex>`: the HMAC-SHA256 of the raw request
body with the webhook's secret (see verify_signature).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
from collections.abc import Callable
from datetime import datetime

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import close_old_connections, transaction
from django.db.models import Q
from django.utils import timezone

from crawlhub.dates import machine
from crawlhub.http import Fetcher, FetchResult, netguard
from crawlhub.http.urls import URLError, normalize
from crawls import deliveries
from crawls.changes import change_counts
from crawls.deliveries import BACKOFF, MAX_ATTEMPTS, TIMEOUT  # noqa: F401 (the retry schedule)
from crawls.models import Channel, Crawl, DeliveryEvent, Webhook, WebhookDelivery, WebhookEvent

log = logging.getLogger(__name__)

SNIPPET_BYTES = 1000
USER_AGENT = "crawlhub-webhook/1"
Status = WebhookDelivery.Status


# --- Signing ----------------------------------------------------------------------------------


def new_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


def sign(secret: str, body: bytes) -> str:
    """The X-Crawlhub-Signature header value for this body."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify_signature(secret: str, body: bytes, header: str | None) -> bool:
    """What a receiver does: recompute the HMAC of the raw body and compare in constant time."""
    if not header or not header.startswith("sha256="):
        return False
    return hmac.compare_digest(sign(secret, body), header.strip())


def encode(payload: dict) -> bytes:
    """The exact bytes sent (and signed); the same on every attempt."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()


# --- Managing webhooks ------------------------------------------------------------------------


def _clean_url(url: str) -> str:
    url = (url or "").strip()
    try:
        # Stored as the client will send it: the guard below reads the host it connects to.
        url = normalize(url)
    except URLError as exc:
        why = "" if "http(s)" in str(exc) else f": this one {exc}"
        raise ValidationError({"url": [f"Enter an http:// or https:// URL{why}."]}) from None
    try:
        netguard.guard_url(url)
    except netguard.BlockedAddress as exc:
        raise ValidationError({"url": [f"Webhooks may not call private networks: {exc}"]}) from None
    return url


def _clean_events(events: list[str] | None) -> list[str]:
    events = list(dict.fromkeys(events or []))
    if not events or set(events) - set(WebhookEvent.values):
        raise ValidationError(
            {"events": [f"Choose one or more of: {', '.join(WebhookEvent.values)}."]}
        )
    return events


def _checked(errors: dict[str, list[str]], clean, value):
    """clean(value); when it is refused, the value as given and the reason added to errors."""
    try:
        return clean(value)
    except ValidationError as exc:
        errors.update(exc.message_dict)
        return value


def webhook_create(
    *,
    user,
    url: str,
    events: list[str],
    channel: Channel | None = None,
    crawl: Crawl | None = None,
) -> tuple[Webhook, str]:
    """A webhook on a channel (staff) or on one crawl. Returns it and its secret."""
    errors: dict[str, list[str]] = {}
    if channel is not None and crawl is not None:
        errors["channel"] = ["Choose a channel or a crawl, not both."]
    elif channel is None and crawl is None:
        errors["channel"] = ["Choose a channel or a crawl."]
    if channel is not None and not user.is_staff:
        raise PermissionDenied("Only staff add webhooks to a channel.")
    url = _checked(errors, _clean_url, url)
    events = _checked(errors, _clean_events, events)
    if errors:
        raise ValidationError(errors)
    secret = new_secret()
    webhook = Webhook.objects.create(
        channel=channel, crawl=crawl, url=url, events=events, secret=secret, created_by=user
    )
    return webhook, secret


def webhooks_visible_to(user):
    """Staff: every webhook. Others: the webhooks of their own crawls, and channel webhooks."""
    hooks = Webhook.objects.select_related("channel", "crawl")
    if user.is_staff:
        return hooks
    return hooks.filter(Q(crawl__created_by=user) | Q(channel__isnull=False))


def deliveries_visible_to(user, webhook: Webhook):
    """Staff: every delivery of the webhook. Others: those of their own crawls only, since a
    channel's webhook gathers one per crawl of anyone's (its id, event and the answer)."""
    deliveries = webhook.deliveries.select_related("crawl")
    if user.is_staff:
        return deliveries
    # A test delivery is about no crawl: its webhook's owner sees it.
    own_tests = Q(crawl__isnull=True, event=DeliveryEvent.TEST, webhook__crawl__created_by=user)
    return deliveries.filter(Q(crawl__created_by=user) | own_tests)


def can_change(user, webhook: Webhook) -> bool:
    if user.is_staff:
        return True
    return webhook.crawl_id is not None and webhook.crawl.created_by_id == user.pk


def check_can_change(user, webhook: Webhook) -> None:
    """PermissionDenied unless the user may change the webhook (the pages and the API)."""
    if not can_change(user, webhook):
        raise PermissionDenied("Only staff change a channel's webhooks.")


def webhook_update(
    *,
    webhook: Webhook,
    url: str | None = None,
    events: list[str] | None = None,
    active: bool | None = None,
) -> Webhook:
    """Change what was given, checked as at creation; the secret and the target stay."""
    errors: dict[str, list[str]] = {}
    if url is not None:
        url = _checked(errors, _clean_url, url)
    if events is not None:
        events = _checked(errors, _clean_events, events)
    if errors:
        raise ValidationError(errors)
    for name, value in (("url", url), ("events", events), ("active", active)):
        if value is not None:
            setattr(webhook, name, value)
    webhook.save(update_fields=["url", "events", "active"])
    return webhook


def webhook_delete(*, webhook: Webhook) -> None:
    webhook.delete()


# --- Events -----------------------------------------------------------------------------------


def payload_for(crawl: Crawl, event: str, delivery_id: int, changes: dict | None = None) -> dict:
    """What a delivery sends. `changes`: the pages new, changed, unchanged and gone against the
    crawl's baseline (a schedule's previous run; crawls.changes.change_counts), when it has one."""
    return {
        "event": f"crawl.{event}",
        "delivery": delivery_id,
        "crawl": {
            "id": crawl.pk,
            "name": crawl.name,
            "state": crawl.state,
            "channel": crawl.channel.slug,
            "seeds": crawl.seeds,
            "created_by": crawl.created_by.get_username() if crawl.created_by else None,
            "created_at": machine(crawl.created_at),
            "started_at": machine(crawl.started_at),
            "finished_at": machine(crawl.finished_at),
            "stats": crawl.stats,
            "error": crawl.error,
            "end_reason": crawl.end_reason,
            "end_line": crawl.end_line,
            "page": crawl.get_absolute_url(),
            "api": f"/api/crawls/{crawl.pk}/",
            "baseline": crawl.baseline_id,
            "changes": changes,
        },
    }


def crawl_ended(crawl_id: int, event: str) -> list[int]:
    """Record and send a delivery to every active webhook of the crawl, of its channel and,
    for a run of a schedule, of the schedule's template that wants this event. Called after
    the crawl's row is committed. Returns delivery ids."""
    crawl = (
        Crawl.objects.select_related("channel", "created_by", "schedule")
        .filter(pk=crawl_id)
        .first()
    )
    if crawl is None:
        return []
    hooks = hooks_for(crawl, event)
    changes = change_counts(crawl) if hooks else None
    return send_event(
        crawl,
        event,
        lambda delivery_id: payload_for(crawl, event, delivery_id, changes),
        hooks=hooks,
    )


def hooks_for(crawl: Crawl, event: str) -> list[Webhook]:
    """The active webhooks of the crawl, of its channel and, for a run of a schedule, of the
    schedule's template, that want this event."""
    targets = Q(crawl_id=crawl.pk) | Q(channel_id=crawl.channel_id)
    if crawl.schedule_id is not None:
        # Each run is a new crawl: a webhook put on the template is meant for all of them.
        targets |= Q(crawl_id=crawl.schedule.template_id)
    return [hook for hook in Webhook.objects.filter(targets, active=True) if event in hook.events]


def send_event(
    crawl: Crawl,
    event: str,
    payload: Callable[[int], dict],
    *,
    hooks: list[Webhook] | None = None,
) -> list[int]:
    """One delivery of `event` to each of `hooks` (by default hooks_for(crawl, event)), its
    payload made from its id; sent once the caller's transaction commits. Returns their ids."""
    hooks = hooks_for(crawl, event) if hooks is None else hooks
    ids = []
    with transaction.atomic():
        for hook in hooks:
            delivery = WebhookDelivery.objects.create(
                webhook=hook,
                crawl=crawl,
                event=event,
                payload={},
                next_attempt_at=timezone.now(),
            )
            delivery.payload = payload(delivery.pk)
            delivery.save(update_fields=["payload"])
            ids.append(delivery.pk)
        transaction.on_commit(lambda: [enqueue(delivery_id) for delivery_id in ids])
    return ids


def on_crawl_ended(sender, *, crawl_id: int, event: str, **kwargs) -> list[int]:
    """The receiver of crawls.signals.crawl_ended (connected in apps.py)."""
    return crawl_ended(crawl_id, event)


def test_payload(webhook: Webhook, delivery_id: int) -> dict:
    """What a test delivery sends: the event and delivery of any other, and no crawl."""
    return {
        "event": "webhook.test",
        "delivery": delivery_id,
        "webhook": {"id": webhook.pk, "target": webhook.target},
        "crawl": None,
        "sent_at": machine(timezone.now()),
    }


def webhook_send_test(*, webhook: Webhook) -> WebhookDelivery:
    """Send a test delivery now, signed as any other, tried once (no retries: the person who
    asked for it is waiting for its answer). Returns the delivery, with that answer."""
    delivery = WebhookDelivery.objects.create(
        webhook=webhook, event=DeliveryEvent.TEST, payload={}, next_attempt_at=timezone.now()
    )
    delivery.payload = test_payload(webhook, delivery.pk)
    delivery.save(update_fields=["payload"])
    deliver(delivery.pk, retry=False)
    delivery.refresh_from_db()
    return delivery


# --- Delivery ---------------------------------------------------------------------------------


def enqueue(delivery_id: int, *, delay: float = 0) -> None:
    """Send (again) on the control queue, now or after `delay` seconds."""
    deliveries.enqueue(
        deliver_job, delivery_id, delay=delay, what=f"webhook delivery {delivery_id}"
    )


def deliver_job(delivery_id: int) -> str:
    close_old_connections()
    try:
        return deliver(delivery_id)
    finally:
        close_old_connections()


def _post(webhook: Webhook, delivery: WebhookDelivery) -> tuple[int | None, str, str]:
    """(status code, response snippet, error) of one POST. The status decides: a 2xx is
    delivered, any other (a 3xx included: redirects are not followed) is "HTTP <status>"."""
    body = encode(delivery.payload)
    headers = {
        "Content-Type": "application/json",
        "X-Crawlhub-Event": delivery.payload.get("event", f"crawl.{delivery.event}"),
        "X-Crawlhub-Delivery": str(delivery.pk),
        "X-Crawlhub-Signature": sign(webhook.secret, body),
    }
    # The client checks the URL against the private-network guard again: the setting may
    # have been turned on, or the name may resolve elsewhere, since the webhook was made.
    with Fetcher(
        timeout=TIMEOUT,
        total_timeout=2 * TIMEOUT,
        max_bytes=SNIPPET_BYTES,
        user_agent_mode="fixed",
        user_agent=USER_AGENT,
        pool_size=1,
    ) as client:
        result = client.post(webhook.url, body=body, headers=headers)
    if result.status is None:
        return None, "", _failure(result)
    error = "" if 200 <= result.status < 300 else f"HTTP {result.status}"
    return result.status, result.text(), error


# A failed attempt is logged under the name requests gave such failures before the shared
# client ("ConnectionError: connection refused"), so old and new delivery logs read alike.
_FAILURE_NAMES = {
    "refused": "ConnectionError",
    "dns": "ConnectionError",
    "connection": "ConnectionError",
    "timeout": "Timeout",
    "invalid": "InvalidURL",
    "blocked": "BlockedAddress",
}


def _failure(result: FetchResult) -> str:
    name = _FAILURE_NAMES.get(result.error_kind, "RequestException")
    return f"{name}: {result.error.removeprefix('blocked: ')}"[:2000]


def _send(delivery: WebhookDelivery) -> deliveries.Sent:
    status_code, snippet, error = _post(delivery.webhook, delivery)
    return deliveries.Sent(
        error=error,
        entry={"status_code": status_code},
        fields={"response_status": status_code, "response_snippet": snippet},
    )


def deliver(delivery_id: int, *, now: datetime | None = None, retry: bool = True) -> str:
    """One attempt of a delivery if it is due; schedules the next one when it failed (unless
    `retry` is False: then a failed attempt is the last). Returns the delivery's status after
    the attempt, or "skipped"."""
    return deliveries.attempt(
        WebhookDelivery,
        delivery_id,
        _send,
        job=deliver_job,
        what=f"webhook delivery {delivery_id}",
        now=now,
        retry=retry,
    )


def deliver_overdue(now: datetime | None = None) -> int:
    """Periodic sweep: re-enqueue pending deliveries well past their time (scheduler down,
    Redis away when they were due, a worker killed mid-attempt)."""
    return deliveries.overdue(WebhookDelivery, deliver_job, what="webhook delivery", now=now)


def deliver_overdue_job() -> int:
    """The periodic RQ job (crawlhub/cron.py)."""
    close_old_connections()
    try:
        return deliver_overdue()
    finally:
        close_old_connections()
