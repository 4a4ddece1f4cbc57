"""Which pages may open the dashboard's websockets: its own, by scheme, host and port.

A browser sends a websocket the user's cookies whatever page opened it, and says which page in
Origin. Channels' AllowedHostsOriginValidator compares the Origin's host name with
ALLOWED_HOSTS and ignores its scheme and port, so a page served on another port of the
dashboard's host (another app, another user's server on a shared machine) could open one as
the signed-in user. Here the Origin must be the origin the request came to (the scheme, as
Django reads it behind SECURE_PROXY_SSL_HEADER, and the Host, which must be in ALLOWED_HOSTS),
or one of CSRF_TRUSTED_ORIGINS (a public name a proxy serves the dashboard on; `*.` a
subdomain, as for Django's CSRF check), scheme, host and port alike.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain

DEFAULT_PORTS = {"http": 80, "https": 443}
Origin = tuple[str, str, int]  # scheme, host (lowercase, IPv6 without brackets), port


class SameOriginValidator:
    """ASGI middleware: a websocket whose Origin is not the dashboard's is denied (closed
    before it is accepted, as Channels' validator does)."""

    def __init__(self, application) -> None:
        self.application = application

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket" and not origin_allowed(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)


def origin_allowed(scope: dict) -> bool:
    """Whether the websocket's one Origin header names the origin it came to, or a trusted one."""
    origins = _headers(scope, b"origin")
    if len(origins) != 1 or (origin := parse_origin(origins[0])) is None:
        return False
    return origin == own_origin(scope) or any(
        _matches(origin, trusted) for trusted in settings.CSRF_TRUSTED_ORIGINS
    )


def own_origin(scope: dict) -> Origin | None:
    """The origin the request was sent to: its scheme and its Host (when ALLOWED_HOSTS has it)."""
    hosts = _headers(scope, b"host")
    if len(hosts) != 1:
        return None
    domain, port = split_domain_port(hosts[0])
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return None
    scheme = _scheme(scope)
    if not port:
        return scheme, _bare(domain), DEFAULT_PORTS[scheme]
    return (scheme, _bare(domain), int(port)) if port.isascii() and port.isdigit() else None


def parse_origin(text: str) -> Origin | None:
    """An Origin header's scheme://host[:port]; None for "null" or anything with more in it."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname or "@" in parts.netloc:
        return None
    if parts.path or parts.query or parts.fragment:
        return None
    return scheme, parts.hostname.lower(), DEFAULT_PORTS[scheme] if port is None else port


def _matches(origin: Origin, trusted: str) -> bool:
    """One of CSRF_TRUSTED_ORIGINS: exact, or "scheme://*.domain" for its subdomains."""
    wildcard = "://*." in trusted
    found = parse_origin(trusted.replace("://*.", "://", 1) if wildcard else trusted)
    if found is None:
        return False
    if not wildcard:
        return origin == found
    scheme, host, port = found
    return origin[0] == scheme and origin[2] == port and is_same_domain(origin[1], "." + host)


def _scheme(scope: dict) -> str:
    """https for wss, or when the proxy's header says so (Django's HttpRequest.scheme)."""
    if settings.SECURE_PROXY_SSL_HEADER:
        meta_name, secure_value = settings.SECURE_PROXY_SSL_HEADER
        name = meta_name.removeprefix("HTTP_").lower().replace("_", "-").encode()
        values = _headers(scope, name)
        if values:
            return "https" if values[0].split(",", 1)[0].strip() == secure_value else "http"
    return "https" if scope.get("scheme") == "wss" else "http"


def _headers(scope: dict, name: bytes) -> list[str]:
    return [value.decode("latin-1") for key, value in scope.get("headers", ()) if key == name]


def _bare(domain: str) -> str:
    return domain.removeprefix("[").removesuffix("]")
