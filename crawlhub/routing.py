from django.urls import path

from crawlhub.web import consumers
from crawls.routing import websocket_urlpatterns as crawl_routes
from proxies.routing import websocket_urlpatterns as proxy_routes

websocket_urlpatterns = [
    path("ws/health/", consumers.HealthConsumer.as_asgi()),
    *crawl_routes,
    *proxy_routes,
]
