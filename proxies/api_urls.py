"""The proxies app's API routes. crawlhub/api.py reaches both by dotted name: `routes` (a prefix,
its viewset and the basename its URLs are named by) go on the API's one router, and so on its
root's listing; `urlpatterns` are included under /api/ as they are."""

from __future__ import annotations

from django.urls import path

from proxies.api import PoolHealthView, ProxyJobViewSet, ProxyViewSet

# In the API root's order.
routes = [
    ("proxies/jobs", ProxyJobViewSet, "api-proxy-job"),
    ("proxies", ProxyViewSet, "api-proxy"),
]

urlpatterns = [
    path("pool/health/", PoolHealthView.as_view(), name="api-pool-health"),
]
