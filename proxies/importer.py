"""Parsing proxy lists: host:port, scheme://host:port, scheme://user:pass@host:port per line;
the schemes are http, https, socks5 and socks5h.

Pure functions: no database, no network (services.py stores, fetching a URL is there too).
Blank lines and lines starting with # are skipped; everything else is a proxy or an error
with its line number and reason. An error shows the line only as far as it cannot be a secret
(shown_bad_line) and its reason quotes none of it.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

# socks5 resolves the target's name here; socks5h lets the proxy resolve it.
SCHEMES = ("http", "https", "socks5", "socks5h")
USE_SCHEMES = "use http, https, socks5 or socks5h"
# SOCKS5 sends the user name and the password with a one-byte length each (RFC 1929).
SOCKS_CREDENTIAL_BYTES = 255
_SCHEME = re.compile(r"^\s*[a-z][a-z0-9+.-]*://", re.I)
_HOSTNAME = re.compile(
    r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$",
    re.I,
)  # noqa: E501


@dataclass(frozen=True)
class Parsed:
    line: int
    scheme: str
    host: str
    port: int
    username: str = ""
    password: str = ""

    @property
    def address(self) -> tuple[str, str, int]:
        return (self.scheme, self.host.lower(), self.port)


@dataclass(frozen=True)
class LineError:
    line: int
    text: str
    reason: str


@dataclass
class ParseResult:
    proxies: list[Parsed] = field(default_factory=list)
    errors: list[LineError] = field(default_factory=list)
    # Repeated within the same list: (line, text with its password masked, line it repeats).
    repeats: list[tuple[int, str, int]] = field(default_factory=list)


def mask(text: str) -> str:
    """A line as it may be shown: the password replaced by ****.

    The password runs from the first ':' of the credentials to the *last* '@' of the line: it
    may itself hold '@', '/' or spaces, and a line that did not parse says nothing reliable
    about where its host begins. Masking too much of a bad line is fine; too little is not.
    """
    at = text.rfind("@")
    if at == -1:
        return text
    scheme = _SCHEME.match(text)
    colon = text.find(":", scheme.end() if scheme else 0, at)
    if colon == -1:
        return text  # a user name alone is not a secret (masked_url shows it too)
    return f"{text[: colon + 1]}****{text[at:]}"


def shown_bad_line(text: str) -> str:
    """A line that did not parse, as it may be shown: its scheme, a user name before a colon, a
    host that is one (an IP address or a dotted name) and a port that is one; everything else
    as ****. Such a line
    says nothing reliable about where its password is: "http://user:secret" (no host),
    "host:port:user:secret" (a seller's format), "http://token@host:port" (a token as the user
    name), a key in a path or query."""
    scheme = _SCHEME.match(text)
    rest = text[scheme.end() :] if scheme else text
    shown = scheme.group(0).strip() if scheme else ""
    at = rest.rfind("@")
    if at != -1:  # the user name when a colon ends it (as mask), else it may be a token
        user, colon, _ = rest[:at].partition(":")
        shown, rest = shown + (f"{user}:****@" if colon else "****@"), rest[at + 1 :]
    end = min((i for i in (rest.find(c) for c in "/?#") if i != -1), default=len(rest))
    hostport, beyond = rest[:end], rest[end:]
    if hostport.startswith("["):  # [IPv6]:port
        close = hostport.find("]")
        host, tail = (
            (hostport[: close + 1], hostport[close + 1 :]) if close != -1 else (hostport, "")
        )
        port_sep, port = tail[:1], tail[1:]
    else:
        host, port_sep, port = hostport.partition(":")
    shown += host if _shown_host(host) else "****" if host else ""
    if port_sep:
        shown += ":" + (port if port.isascii() and port.isdigit() and len(port) <= 5 else "****")
    if beyond:
        shown += beyond[0] + "****"
    return shown


def _shown_host(host: str) -> bool:
    bare = host.removeprefix("[").removesuffix("]")
    if not _valid_host(bare):
        return False
    try:
        ipaddress.ip_address(bare)
        return True
    except ValueError:
        return "." in bare or bare.lower() == "localhost"


def parse_line(text: str, line: int = 1) -> Parsed | LineError:
    raw = text.strip()
    shown = shown_bad_line(raw)  # errors echo the line; never anything that may be a secret
    if "://" not in raw:
        if "@" in raw:
            return LineError(line, shown, "credentials need a scheme: scheme://user:pass@host:port")
        if raw.count(":") == 3 and not raw.startswith("["):
            return LineError(
                line,
                shown,
                "looks like host:port:user:password; write it as http://user:password@host:port",
            )
        raw = "http://" + raw
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError as exc:
        reason = "port must be a number from 1 to 65535" if "port" in str(exc).lower() else str(exc)
        return LineError(line, shown, reason)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        return LineError(line, shown, f"unsupported scheme {scheme!r} ({USE_SCHEMES})")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return LineError(line, shown, "unexpected path after host:port")
    host = parts.hostname or ""
    if not host:
        return LineError(line, shown, "missing host")
    if not _valid_host(host):
        return LineError(line, shown, _host_problem(host))
    if port is None:
        return LineError(line, shown, "missing port")
    if not 1 <= port <= 65535:
        return LineError(line, shown, "port must be a number from 1 to 65535")
    if (parts.username is not None or parts.password is not None) and not (
        parts.username and parts.password
    ):
        return LineError(line, shown, "credentials must be user:password")
    username, password = unquote(parts.username or ""), unquote(parts.password or "")
    if not (username + password).isprintable():
        # A NUL (%00) or another control character: no proxy takes one, and PostgreSQL
        # refuses to store a NUL.
        return LineError(line, shown, "credentials must not have control characters")
    if (
        scheme.startswith("socks")
        and max(len(username.encode()), len(password.encode())) > SOCKS_CREDENTIAL_BYTES
    ):
        return LineError(
            line, shown, f"a SOCKS5 user name or password is at most {SOCKS_CREDENTIAL_BYTES} bytes"
        )
    return Parsed(line, scheme, host.lower(), port, username, password)


def _host_problem(host: str) -> str:
    """Why `host` is none, without quoting it (it may be part of a password)."""
    if not host.isascii():
        return "invalid host: a name with letters outside a-z is written in punycode (xn--...)"
    if not host.isprintable():
        return "invalid host: it has a control character"
    return "invalid host: not an IP address or a host name (letters a-z, digits, - and .)"


def _valid_host(host: str) -> bool:
    if not (host.isascii() and host.isprintable()):  # an IPv6 zone (%eth0) may hold anything
        return False
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return bool(_HOSTNAME.match(host)) and not host.replace(".", "").isdigit()


def parse(text: str) -> ParseResult:
    result = ParseResult()
    first_seen: dict[tuple[str, str, int], int] = {}
    # A byte-order mark (lists saved by Windows editors) is not part of the first host.
    for number, line in enumerate(text.removeprefix("\ufeff").splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        parsed = parse_line(stripped, number)
        if isinstance(parsed, LineError):
            result.errors.append(parsed)
        elif parsed.address in first_seen:
            result.repeats.append((number, mask(stripped), first_seen[parsed.address]))
        else:
            first_seen[parsed.address] = number
            result.proxies.append(parsed)
    return result
