"""Refusing to crawl private networks (CRAWLHUB_BLOCK_PRIVATE_NETWORKS).

A crawl fetches whatever URLs its users and the pages they point at name. On a server that sits
inside a network, that would let anyone who may create a crawl read internal services (the
cloud metadata endpoint, an admin panel on 10.x, Redis on loopback). With the guard on, a crawl
refuses a URL whose host is, or resolves to, anything but a public address. The HTTP client
(client.py) asks it for every URL it fetches and every redirect hop: crawl pages, robots.txt,
proxy lists and webhook deliveries alike; only proxy checks of the operator's own
PROXY_CHECK_URL are let through.

The check resolves names itself just before the fetch does, so it stops mistakes and plain
server-side request forgery; a DNS server that answers differently a moment later (DNS
rebinding) is outside what it can see. A name that does not resolve is let through: the fetch
then fails with its own DNS error.

Through a proxy the target is checked the same way, before the proxy is asked. A socks5h://
proxy resolves the name again with its own DNS: a name that is public here (or unknown here)
and private there reaches the proxy's network, which is this one only if the operator put the
proxy inside it.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from urllib.parse import unquote, urlsplit

from django.conf import settings

SETTING = "CRAWLHUB_BLOCK_PRIVATE_NETWORKS"
CACHE_SECONDS = 60.0
CACHE_SIZE = 4096
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_cache: dict[str, tuple[float, str]] = {}  # host -> (valid until, reason or "")
_lock = threading.Lock()


class BlockedAddress(ValueError):
    """The host is, or resolves to, an address the guard refuses; str() says which and why."""


def check_host(host: str) -> None:
    """None for a public host; BlockedAddress naming the address and its kind otherwise."""
    host = unquote(host).strip().strip("[]").rstrip(".").lower()
    if not host:
        return
    now = time.monotonic()
    cached = _cache.get(host)
    if cached is None or cached[0] < now:
        cached = (now + CACHE_SECONDS, _reason(host))
        with _lock:
            if len(_cache) >= CACHE_SIZE:
                _cache.clear()
            _cache[host] = cached
    if cached[1]:
        raise BlockedAddress(cached[1])


def enabled() -> bool:
    """Whether crawlhub refuses private networks (the setting; on by default with HTTPS)."""
    return bool(getattr(settings, SETTING, False))


def guard_url(url: str) -> None:
    """check_url when the guard is on; nothing when it is off. Every URL a user gives or a
    crawled page names goes through this before crawlhub connects to it."""
    if enabled():
        check_url(url)


def check_url(url: str) -> None:
    """check_host for the host of an http(s) URL; URLs without a host are left to the fetch."""
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return
    if host:
        check_host(host)


def kind_of(address: IPAddress) -> str:
    """Why `address` is not public ("private", "loopback", ...), or "" when it is."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            return kind_of(embedded)
    if address.is_unspecified:
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:
        return "multicast"
    if isinstance(address, ipaddress.IPv4Address) and address in _CGNAT:
        return "carrier-grade NAT"
    if address.is_reserved:
        return "reserved"
    if address.is_private:
        return "private"
    if not address.is_global:
        return "non-public"
    return ""


def _reason(host: str) -> str:
    try:
        literal: IPAddress | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        kind = kind_of(literal)
        return f"{literal} is {_article(kind)} {kind} address ({SETTING})" if kind else ""
    # Also resolves the odd IPv4 forms a URL can carry ("127.1", "2130706433", "0x7f.0.0.1").
    for address in _resolve(host):
        kind = kind_of(address)
        if kind:
            return f"{host} resolves to {address}, {_article(kind)} {kind} address ({SETTING})"
    return ""


def _resolve(host: str) -> list[IPAddress]:
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return []
    addresses = []
    for info in infos:
        try:
            addresses.append(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]))
        except ValueError:
            continue
    return addresses


def _article(kind: str) -> str:
    return "an" if kind[0] in "aeiou" else "a"
