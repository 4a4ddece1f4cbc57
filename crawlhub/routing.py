"""The websocket routes: crawlhub's own, then each app's, by its routing module's dotted name
(as crawlhub/urls.py includes the apps' pages)."""

from django.urls import path

from crawlhub.web import consumers
from crawlhub.web.websocket_routes import include_websockets

websocket_urlpatterns = [
    path("ws/health/", consumers.HealthConsumer.as_asgi()),
    *include_websockets("crawls.routing"),
    *include_websockets("proxies.routing"),
]
