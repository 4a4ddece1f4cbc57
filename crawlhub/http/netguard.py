"""Refusing to crawl private networks (CRAWLHUB_BLOCK_PRIVATE_NETWORKS).

A crawl fetches whatever URLs its users and the pages they point at name. On a server that sits
inside a network, that would let anyone who may create a crawl read internal services (the
cloud metadata endpoint, an admin panel on 10.x, Redis on loopback). With the guard on, a crawl
refuses a URL whose host is, or resolves to, anything but a public address. The HTTP client
(client.py) asks it for every URL it fetches and every redirect hop: crawl pages, robots.txt,
proxy lists and webhook deliveries alike; only proxy checks of the operator's own
PROXY_CHECK_URL are let through.

It is asked twice. Before a fetch, check_url() reads the URL as the client will send it
(urls.normalize: the host a backslash or an "@" might hide from another parser is the host
here) and resolves the name itself, to refuse in words before any work is done; a name that
does not resolve is let through, and the fetch fails with its own DNS error. Then, for a
direct connection, session.py asks check_address() about the very address the socket is
about to connect to, so a DNS server that answers differently the second time (rebinding)
reaches nothing private either. CRAWLHUB_PRIVATE_NETWORKS_ALLOWED lets chosen addresses or
networks (with a port or without) through: an intranet site crawled on purpose.

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
from functools import lru_cache

from django.conf import settings

from crawlhub.http.urls import URLError, normalize

SETTING = "CRAWLHUB_BLOCK_PRIVATE_NETWORKS"
ALLOWED_SETTING = "CRAWLHUB_PRIVATE_NETWORKS_ALLOWED"
CACHE_SECONDS = 60.0
CACHE_SIZE = 4096
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_cache: dict[str, tuple[float, tuple[IPAddress, ...]]] = {}  # host -> (valid until, addresses)
_lock = threading.Lock()


class BlockedAddress(ValueError):
    """The host is, or resolves to, an address the guard refuses; str() says which and why."""


def enabled() -> bool:
    """Whether crawlhub refuses private networks (the setting; on by default with HTTPS)."""
    return bool(getattr(settings, SETTING, False))


def guard_url(url: str) -> None:
    """check_url when the guard is on; nothing when it is off. Every URL a user gives or a
    crawled page names goes through this before crawlhub connects to it."""
    if enabled():
        check_url(url)


def check_url(url: str) -> None:
    """check_host for the host of an http(s) URL, read as the client reads it (urls.normalize);
    a URL the client would not fetch is left to the fetch, which says why."""
    try:
        normal = normalize(url, userinfo=True)
    except URLError:
        return
    authority = normal.partition("://")[2].partition("/")[0].rpartition("@")[2]
    if authority.startswith("["):
        host, _, port = authority[1:].partition("]")
        port = port[1:]
    else:
        host, _, port = authority.partition(":")
    default = 443 if normal.startswith("https:") else 80
    check_host(host, int(port) if port else default)


def check_host(host: str, port: int | None = None) -> None:
    """None for a public host (or one CRAWLHUB_PRIVATE_NETWORKS_ALLOWED lets through on
    `port`); BlockedAddress naming the address and its kind otherwise."""
    host = host.strip().strip("[]").rstrip(".").lower()
    if not host:
        return
    try:
        literal: IPAddress | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        if reason := _refused(literal, port):
            raise BlockedAddress(f"{literal} is {reason}")
        return
    # Also resolves the odd IPv4 forms a URL can carry ("127.1", "2130706433", "0x7f.0.0.1").
    for address in _addresses(host):
        if reason := _refused(address, port):
            raise BlockedAddress(f"{host} resolves to {address}, {reason}")


def check_address(address: str, port: int, host: str) -> None:
    """The check at connection time: `address` is what the socket is about to connect to, for
    `host`; BlockedAddress when the guard is on and refuses it. Unlike check_host, this is
    the address itself, so no later answer of a DNS server can change it."""
    if not enabled():
        return
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if reason := _refused(ip, port):
        host = host.strip("[]")
        if host == str(ip) or _same_literal(host, ip):
            raise BlockedAddress(f"{ip} is {reason}")
        raise BlockedAddress(f"{host} resolves to {ip}, {reason}")


def _same_literal(host: str, ip: IPAddress) -> bool:
    try:
        return ipaddress.ip_address(host) == ip
    except ValueError:
        return False


def _refused(address: IPAddress, port: int | None) -> str:
    """ "a loopback address (CRAWLHUB_BLOCK_PRIVATE_NETWORKS)" and the like, or "" for an
    address the guard lets through."""
    kind = kind_of(address)
    if not kind or _allowed(address, port):
        return ""
    return f"{_article(kind)} {kind} address ({SETTING})"


def _allowed(address: IPAddress, port: int | None) -> bool:
    for network, allowed_port in allowed_networks(tuple(getattr(settings, ALLOWED_SETTING, ()))):
        if address in network and (allowed_port is None or allowed_port == port):
            return True
    return False


@lru_cache(maxsize=8)
def allowed_networks(entries: tuple[str, ...]) -> tuple[tuple[Network, int | None], ...]:
    """CRAWLHUB_PRIVATE_NETWORKS_ALLOWED read: each entry an address or a network, with a port
    or without ("10.1.2.3", "10.1.0.0/16", "10.1.2.3:8080", "[fd00::5]:443"); ValueError
    naming the entry that is none of these."""
    networks = []
    for entry in entries:
        text, port = entry.strip(), None
        if text.startswith("["):
            text, _, rest = text[1:].partition("]")
            if rest:
                port = _port(rest.removeprefix(":"), entry)
        elif text.count(":") == 1:
            text, _, port_text = text.partition(":")
            port = _port(port_text, entry)
        try:
            networks.append((ipaddress.ip_network(text, strict=False), port))
        except ValueError:
            raise ValueError(
                f"{ALLOWED_SETTING}: {entry!r} is not an address or network "
                "(10.1.2.3, 10.1.0.0/16, 10.1.2.3:8080 or [fd00::5]:443)"
            ) from None
    return tuple(networks)


def _port(text: str, entry: str) -> int:
    if text.isdigit() and 0 < int(text) <= 65535:
        return int(text)
    raise ValueError(f"{ALLOWED_SETTING}: {entry!r} has a port that is not 1 to 65535")


def _addresses(host: str) -> tuple[IPAddress, ...]:
    now = time.monotonic()
    cached = _cache.get(host)
    if cached is None or cached[0] < now:
        cached = (now + CACHE_SECONDS, tuple(_resolve(host)))
        with _lock:
            if len(_cache) >= CACHE_SIZE:
                _cache.clear()
            _cache[host] = cached
    return cached[1]


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
