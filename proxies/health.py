"""The proxy pool's health as the Proxies page shows it, and pushing it to open pages."""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction
from django.db.models import Count
from django.utils import timezone
from rq.timeouts import JobTimeoutException

from proxies import pool
from proxies.models import Proxy, ProxyEvent, ProxyState

log = logging.getLogger(__name__)

# The Proxies page's websocket group, and how often at most a change is pushed to it.
HEALTH_GROUP = "proxies"
PUBLISH_EVERY_MS = 250


def health_snapshot() -> dict:
    """What the Proxies page shows live: the pool's health (Redis) and the inventory (database):
    known / new (unchecked, or failing every check so far) / active / disabled / removed, and
    removals in the last hour."""
    by_state = dict(Proxy.objects.values_list("state").annotate(n=Count("pk")).order_by())
    inventory = {state: by_state.get(state, 0) for state in ProxyState.values}
    # New ones that failed their checks so far are not "not checked yet".
    failing = Proxy.objects.filter(state=ProxyState.NEW, failures__gt=0).count()
    hour_ago = timezone.now() - timedelta(hours=1)
    return {
        "type": "proxies.health",
        **pool.health(),
        "inventory": {
            "known": sum(inventory.values()),
            **inventory,
            "unchecked": inventory[ProxyState.NEW] - failing,
            "failing": failing,
        },
        "removed_last_hour": ProxyEvent.objects.filter(
            kind=ProxyEvent.Kind.REMOVED, at__gte=hour_ago
        ).count(),
        "at": time.time(),
    }


def publish_health(*, force: bool = True) -> bool:
    """Push health_snapshot() to the open Proxies pages; unless forced, at most once per
    PUBLISH_EVERY_MS across processes. Never raises: the pages refresh on their own too."""
    try:
        if not pool.publish_slot(PUBLISH_EVERY_MS) and not force:
            return False
        async_to_sync(get_channel_layer().group_send)(HEALTH_GROUP, health_snapshot())
        return True
    except JobTimeoutException:
        raise  # RQ ending the job that published: not a publishing failure to shrug off
    except Exception:
        log.warning("publishing proxy pool health failed", exc_info=True)
        return False


def announce(*, force: bool = True) -> None:
    """Push the health to open pages once the change is committed (throttled unless forced)."""
    transaction.on_commit(lambda: publish_health(force=force))
