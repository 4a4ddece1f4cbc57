"""The proxy check's other end: crawlhub's /proxies/echo played by a local site, and proxies in
the inventory from their URLs."""

from __future__ import annotations

import json

from proxies import checks
from proxies.models import Proxy
from tests.support.sites import Request, Response


def echo_handler(request: Request) -> Response:
    """Plays crawlhub's /proxies/echo: the client address and the proxy headers that arrived."""
    headers = {k: v for k, v in request.headers.items() if k in checks.PROXY_HEADERS}
    body = json.dumps({"origin": request.client[0], "headers": headers})
    return Response(body=body, content_type="application/json")


def add_proxy(url: str, **fields) -> Proxy:
    """A Proxy row for scheme://host:port, with any other fields given."""
    scheme, rest = url.split("://")
    host, port = rest.rsplit(":", 1)
    return Proxy.objects.create(scheme=scheme, host=host, port=int(port), **fields)
