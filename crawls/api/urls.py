"""The crawls app's API routes: a prefix, its viewset and the basename its URLs are named by
(`api-crawl-list`, ...). The API's one router (crawlhub/api.py) registers them by this list's
dotted name, as the project's urls include the app's pages by name."""

from __future__ import annotations

from crawls.api.alerts import AlertRuleViewSet, AlertViewSet
from crawls.api.channels import ChannelViewSet
from crawls.api.crawls import CrawlViewSet
from crawls.api.schedules import ScheduleViewSet
from crawls.api.webhooks import WebhookViewSet

# In the API root's order.
routes = [
    ("crawls", CrawlViewSet, "api-crawl"),
    ("channels", ChannelViewSet, "api-channel"),
    ("schedules", ScheduleViewSet, "api-schedule"),
    ("webhooks", WebhookViewSet, "api-webhook"),
    ("alert-rules", AlertRuleViewSet, "api-alert-rule"),
    ("alerts", AlertViewSet, "api-alert"),
]
