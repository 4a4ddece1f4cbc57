"""What crawl control tells the integrations, without importing them."""

from django.dispatch import Signal

# A crawl's row says it ended, and that is committed. Sent with crawl_id and event
# ("finished", "failed" or "cancelled"); crawls/webhooks.py delivers it (connected in apps.py).
crawl_ended = Signal()
