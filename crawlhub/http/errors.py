"""What went wrong in a fetch: a one-line message for people and a kind for code.

requests and urllib3 report trouble as exceptions nested several deep, with object addresses in
their texts. classify() turns one into a FetchError: a short message ("connection refused",
"DNS lookup failed for x.example", "timeout after 10 s (connecting)") and the kind callers
branch on ("timeout", "refused", "dns", "connection", "proxy", "invalid", ...).
"""

from __future__ import annotations

import http.client
import socket
from urllib.parse import urlsplit

import requests
import socks
import urllib3.exceptions

# What a proxy's own failures read as (the kind is "proxy"); proxy checks tell them apart.
PROXY_REFUSED = "proxy refused the connection"
PROXY_TIMED_OUT = "proxy timed out"
PROXY_AUTH_REFUSED = "proxy refused the user name and password (SOCKS5 authentication failed)"
# SOCKS5 reply codes (RFC 1928) about the target, as the proxy saw it: (message, kind).
_SOCKS_TARGET_REPLIES = {
    0x03: ("network unreachable (reported by the SOCKS proxy)", "connection"),
    0x04: ("host unreachable (reported by the SOCKS proxy)", "connection"),
    0x05: ("connection refused (reported by the SOCKS proxy)", "refused"),
    0x06: ("TTL expired (reported by the SOCKS proxy)", "connection"),
}


class FetchError(Exception):
    """Why a fetch stopped; turned into FetchResult.error / error_kind, never raised out."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind


def deadline_error(total_timeout: float) -> FetchError:
    return FetchError(f"timeout after {total_timeout:g} s (whole fetch)", "timeout")


def timeout_error(used: float, phase: str, *, timeout: float, total_timeout: float) -> FetchError:
    """A socket timeout of `used` seconds in `phase`: shorter than the usual one only near the
    whole-fetch deadline, which is then what ran out."""
    if used < timeout:
        return deadline_error(total_timeout)
    return FetchError(f"timeout after {used:g} s ({phase})", "timeout")


def classify(
    exc: Exception, *, url: str, used: float, timeout: float, total_timeout: float
) -> FetchError:
    """The FetchError for what requests raised sending to `url` with a socket timeout of
    `used` seconds."""
    chain = _causes(exc)
    if socks_errors := [e for e in chain if isinstance(e, socks.ProxyError)]:
        # PySocks wraps what went wrong in a GeneralProxyError("Socket error"): the innermost
        # says what it was.
        return _socks_error(socks_errors[-1], chain, url)
    if isinstance(exc, requests.exceptions.ProxyError):
        return FetchError(_proxy_message(chain), "proxy")
    limits = {"timeout": timeout, "total_timeout": total_timeout}
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return timeout_error(used, "connecting", **limits)
    if isinstance(exc, requests.exceptions.Timeout):
        return timeout_error(used, "waiting for the response", **limits)
    if isinstance(exc, requests.exceptions.SSLError):
        return FetchError(f"TLS error: {describe(chain[-1])}", "connection")
    if isinstance(exc, requests.exceptions.ConnectionError):
        return _connection_error(chain, url)
    if isinstance(exc, (requests.exceptions.InvalidURL, requests.exceptions.InvalidSchema)):
        return FetchError(f"invalid URL {url[:200]!r}: {describe(exc)}", "invalid")
    if isinstance(exc, (requests.exceptions.InvalidHeader, ValueError)):
        return FetchError(f"invalid request: {describe(exc)}", "invalid")
    return FetchError(f"request failed: {describe(chain[-1])}", "connection")


def describe(exc: BaseException) -> str:
    """A short, one-line text for an exception (urllib3's reprs carry object addresses)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]


def _causes(exc: BaseException) -> list[BaseException]:
    """`exc` and what it wraps (args, .reason, __cause__, __context__), outermost first."""
    seen: list[BaseException] = []
    todo = [exc]
    while todo and len(seen) < 20:
        current = todo.pop(0)
        if any(current is s for s in seen):
            continue
        seen.append(current)
        inner = [getattr(current, "reason", None), current.__cause__, current.__context__]
        inner += list(current.args)
        todo += [e for e in inner if isinstance(e, BaseException)]
    return seen


def _connection_error(chain: list[BaseException], url: str) -> FetchError:
    if any(isinstance(e, urllib3.exceptions.NameResolutionError) for e in chain) or any(
        isinstance(e, socket.gaierror) for e in chain
    ):
        return FetchError(f"DNS lookup failed for {_host(url)}", "dns")
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return FetchError("connection refused", "refused")
    if any(isinstance(e, http.client.RemoteDisconnected) for e in chain):
        return FetchError("connection closed by the server without a response", "connection")
    return FetchError(f"connection failed: {describe(chain[-1])}", "connection")


def _proxy_message(chain: list[BaseException]) -> str:
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return PROXY_REFUSED
    if any(isinstance(e, (urllib3.exceptions.NameResolutionError, socket.gaierror)) for e in chain):
        return "DNS lookup failed for the proxy"
    if any(isinstance(e, TimeoutError) for e in chain):
        return PROXY_TIMED_OUT
    # Tunnel failures ("Tunnel connection failed: 407 ...") carry the useful text innermost.
    return f"proxy failed: {describe(chain[-1])}"


def _socks_error(exc: socks.ProxyError, chain: list[BaseException], url: str) -> FetchError:
    """What PySocks raised, connecting through a SOCKS proxy: the proxy's fault (kind "proxy")
    unless the proxy reported the target's."""
    if isinstance(exc, socks.ProxyConnectionError):  # the SOCKS server itself was not reached
        return FetchError(_proxy_message(chain), "proxy")
    if isinstance(exc, socks.SOCKS5AuthError):
        if "authentication failed" not in exc.msg:  # no method offered was acceptable
            return FetchError(
                "proxy turned down every login method offered (SOCKS5): does it need a user "
                "name and password?",
                "proxy",
            )
        return FetchError(PROXY_AUTH_REFUSED, "proxy")
    if isinstance(exc, socks.SOCKS5Error):
        code = exc.msg.split(":", 1)[0]
        reply = int(code, 16) if code.startswith("0x") else -1
        if reply in _SOCKS_TARGET_REPLIES:
            message, kind = _SOCKS_TARGET_REPLIES[reply]
            return FetchError(message, kind)
        return FetchError(f"proxy failed: SOCKS5 {exc.msg}", "proxy")
    if any(isinstance(e, socket.gaierror) for e in chain):  # socks5:// resolves names here
        return FetchError(f"DNS lookup failed for {_host(url)}", "dns")
    if any(isinstance(e, TimeoutError) for e in chain):
        return FetchError(PROXY_TIMED_OUT, "proxy")
    return FetchError(f"proxy failed: {describe(exc)}", "proxy")


def _host(url: str) -> str:
    try:
        return urlsplit(url).hostname or url
    except ValueError:
        return url
