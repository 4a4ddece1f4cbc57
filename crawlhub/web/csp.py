"""The Content-Security-Policy header on every answer.

crawlhub's pages load their scripts and styles from its own static files only: no inline
<script>, no on* handler and no style attribute in a template (the live pages' snapshot is JSON
data in a json_script tag, which runs nothing). Scripts may change styles through the DOM
(element.style, as the chart does); that is allowed. The websockets go to this same host.

django-rq's dashboard (staff only, under RQ_DASHBOARD, its own templates) has inline scripts,
onclick handlers and style attributes of its own: there, and only there, inline ones are
allowed too. Everything else in the policy holds there as well.

The API's documentation page (Swagger UI's stylesheet draws its icons as data: SVG images) may
show data: images; its scripts and styles are files of this site like everywhere else.
"""

from __future__ import annotations

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponse

HEADER = "Content-Security-Policy"
# Where crawlhub/urls.py mounts django-rq's views, and the API's documentation page.
RQ_DASHBOARD = "/rq/"
API_DOCS = "/api/docs/"


def policy(request: HttpRequest) -> str:
    inline = " 'unsafe-inline'" if request.path.startswith(RQ_DASHBOARD) else ""
    try:
        websocket = f" {'wss' if request.is_secure() else 'ws'}://{request.get_host()}"
    except DisallowedHost:  # the answer is a 400 anyway
        websocket = ""
    images = ["img-src 'self' data:"] if request.path == API_DOCS else []
    return "; ".join(
        [
            "default-src 'self'",
            f"script-src 'self'{inline}",
            f"style-src 'self'{inline}",
            *images,
            f"connect-src 'self'{websocket}",
            "frame-ancestors 'none'",
            "object-src 'none'",
            "base-uri 'self'",
            "form-action 'self'",
        ]
    )


class ContentSecurityPolicyMiddleware:
    """Adds the policy to every response that does not set one itself."""

    async_capable = True
    sync_capable = True

    def __init__(self, get_response) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest):
        if iscoroutinefunction(self):
            return self._acall(request)
        return self._add(request, self.get_response(request))

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        return self._add(request, await self.get_response(request))

    @staticmethod
    def _add(request: HttpRequest, response: HttpResponse) -> HttpResponse:
        if HEADER not in response:
            response[HEADER] = policy(request)
        return response
