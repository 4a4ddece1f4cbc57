"""Channels, crawls and their results. Live state of a running crawl is in Redis (frontier.py);
these rows hold what a crawl is, who did what to it, and what it fetched.

One module per thing a reader looks for; every name is importable from here (`from
crawls.models import Crawl`), and Django finds the models through these imports.
The private names are re-exported too: migration 0003 names crawls.models._all_events."""

from crawls.models.alerts import Alert, AlertKind, AlertMail, AlertRule
from crawls.models.channels import Channel, ProxyStrategy, ProxyUse, UserAgentMode
from crawls.models.crawls import (
    COUNTERS,
    CRAWL_OPTIONS,
    MAX_BODY_BYTES,
    MAX_SLICE_BODY_BYTES,
    MB,
    OVER_STATES,
    Crawl,
    CrawlAuth,
    CrawlOptions,
    CrawlState,
    EndReason,
)
from crawls.models.deliveries import Delivery
from crawls.models.events import CrawlDeletion, CrawlEvent
from crawls.models.fields import LinesField, RulesField
from crawls.models.pages import (
    COVERED,
    URL_SORT_CHARS,
    Change,
    Link,
    Page,
    PageQuerySet,
    PageSource,
    _by_crawl,
    _covering,
)
from crawls.models.queue import FailedRequest, SpilledRequest
from crawls.models.schedules import CrawlSchedule
from crawls.models.webhooks import (
    DeliveryEvent,
    Webhook,
    WebhookDelivery,
    WebhookEvent,
    _all_events,
)

__all__ = [
    "COUNTERS",
    "COVERED",
    "CRAWL_OPTIONS",
    "MAX_BODY_BYTES",
    "MAX_SLICE_BODY_BYTES",
    "MB",
    "OVER_STATES",
    "URL_SORT_CHARS",
    "Alert",
    "AlertKind",
    "AlertMail",
    "AlertRule",
    "Change",
    "Channel",
    "Crawl",
    "CrawlAuth",
    "CrawlDeletion",
    "CrawlEvent",
    "CrawlOptions",
    "CrawlSchedule",
    "CrawlState",
    "Delivery",
    "DeliveryEvent",
    "EndReason",
    "FailedRequest",
    "Link",
    "LinesField",
    "Page",
    "PageQuerySet",
    "PageSource",
    "ProxyStrategy",
    "ProxyUse",
    "RulesField",
    "SpilledRequest",
    "UserAgentMode",
    "Webhook",
    "WebhookDelivery",
    "WebhookEvent",
    "_all_events",
    "_by_crawl",
    "_covering",
]
