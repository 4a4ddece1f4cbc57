from django.urls import path

from crawls import consumers

websocket_urlpatterns = [
    path("ws/crawls/", consumers.CrawlListConsumer.as_asgi()),
    path("ws/crawls/<int:pk>/", consumers.CrawlConsumer.as_asgi()),
]
