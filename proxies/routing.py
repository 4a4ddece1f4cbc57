from django.urls import path

from proxies import consumers

websocket_urlpatterns = [
    path("ws/proxies/", consumers.ProxyHealthConsumer.as_asgi()),
]
