"""include() for websocket routes: a module's `websocket_urlpatterns`, given by the module's
dotted name, as Django's include() takes a module's `urlpatterns`. The project's routing reaches
each app's consumers this way, so crawlhub never imports an app."""

from __future__ import annotations

from django.urls import URLPattern
from django.utils.module_loading import import_string


def include_websockets(module: str) -> list[URLPattern]:
    """The websocket routes of `module` ("crawls.routing"), to spread into a URLRouter's list."""
    return list(import_string(f"{module}.websocket_urlpatterns"))
