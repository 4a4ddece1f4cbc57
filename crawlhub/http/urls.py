"""URLs a crawler can fetch: one reading of a URL, shared by every check and by the client.

A URL is read once, by normalize(), into the form the HTTP client sends: scheme and host
lowercase, the host in ASCII (IDNA) or as a canonical IP address, no default port, no user
name or password, backslashes read as slashes and dot segments resolved in the path (as
browsers and urllib3 read them), every character the client would escape escaped, no fragment.
requests and urllib3 send that string as it is, and urllib.parse reads the same host from it,
so a check (validation, scope, the private-network guard, credentials' origins, robots, dedup)
can never be told a different host than the socket connects to: the authority
`10.0.0.5:80\\@public.example` is host 10.0.0.5 here, for the client and for every check alike.

What the readers would disagree on is refused rather than guessed: a user name or password in
the authority, a host with characters no DNS name has, a number-like host that is no IPv4
address (`1.2.3.4.5`), an IPv6 zone. tests/http/test_url_normalization.py holds the property:
whatever the authority, the host the guard saw is the host the socket reached.
"""

from __future__ import annotations

import ipaddress
import re
from functools import lru_cache
from urllib.parse import unquote

import idna

MAX_URL_LENGTH = 8000
SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_HOST_LENGTH = 253

# Already in normal form, the shape of nearly every link: a lowercase host name whose last
# label starts with a letter, or a canonical dotted IPv4; a port without a leading zero; a path
# of characters nothing escapes; an optional non-empty query. Dot segments, a default port and
# "%" (an escape that might hide an unreserved character) are checked apart or sent the long way.
_PATH_CHARS = r"A-Za-z0-9\-._~!$&'()*+,;=:@/"
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_NORMAL = re.compile(
    r"(?:http://|(https)://)([a-z0-9_.\-]+)(?::([1-9][0-9]{0,4}))?"
    rf"/[{_PATH_CHARS}]*(?:\?[{_PATH_CHARS}?]+)?"
)
_AUTHORITY_END = re.compile(r"[/?#]")
_NORMAL_PATH = re.compile(rf"/[{_PATH_CHARS}]*(?:\?[{_PATH_CHARS}?]+)?")
_PLAIN_HOST = re.compile(
    rf"(?:[a-z0-9_\-]{{1,63}}\.)*[a-z][a-z0-9_\-]{{0,62}}|{_OCTET}(?:\.{_OCTET}){{3}}"
)

# What the path and the query keep as they are (RFC 3986 pchar, plus "/" and, in the query,
# "?"): exactly what urllib3 leaves unescaped, so that the client changes nothing.
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_PATH_SAFE = _UNRESERVED | frozenset("!$&'()*+,;=:@/")
_QUERY_SAFE = _PATH_SAFE | {"?"}
# A user name or password keeps only what cannot end it or start the host.
_USERINFO_SAFE = _UNRESERVED | frozenset("!$&'()*+,;=")
_HEX = frozenset("0123456789abcdefABCDEF")
_OCTAL = frozenset("01234567")
# What a host name may hold once in ASCII: letters, digits, hyphen, underscore, dot.
_HOST_NAME = re.compile(r"[a-z0-9_\-]+(?:\.[a-z0-9_\-]+)*")
_HEX_NUMBER = re.compile(r"0[xX][0-9a-fA-F]*")


class URLError(ValueError):
    """A URL the client would not fetch, or would read differently from the checks; str() says
    why in a few words ("has a user name or password before its host")."""


class URLTooLong(URLError):
    """A URL longer than MAX_URL_LENGTH in normal form; `normal` is that form, for a caller that
    records the URL with its error rather than dropping it (a link of a crawled page)."""

    def __init__(self, normal: str) -> None:
        super().__init__(f"is longer than {MAX_URL_LENGTH} characters ({len(normal)})")
        self.normal = normal


def normalize(url: str, *, userinfo: bool = False) -> str:
    """`url` in the form the HTTP client sends (see the module's docstring); URLError when
    it is not an absolute http(s) URL that every reader reads the same way.

    A user name or password before the host is refused unless `userinfo` (a proxy list's
    address may carry its basic-auth credentials; a crawl's never do: they would be shown
    wherever its URLs are). Kept, it is escaped so that no reader can take it for the host."""
    match = _NORMAL.fullmatch(url)
    if match is None or len(url) > MAX_URL_LENGTH or "/." in url:  # dot segments: the long way
        return _normalize(url, userinfo)
    https, host, port = match.groups()
    if not _plain_host(host) or (
        port is not None and (int(port) > 65535 or port == ("443" if https else "80"))
    ):
        return _normalize(url, userinfo)
    return url


def is_normal_path(path: str) -> bool:
    """True when `path` (with its query) is as normalize() leaves it: an origin in normal form
    followed by it is a URL in normal form, if not too long (link_urls.py's shortcut)."""
    return _NORMAL_PATH.fullmatch(path) is not None and "/." not in path


@lru_cache(maxsize=4096)
def _plain_host(host: str) -> bool:
    """A host name whose last label starts with a letter, or four decimal numbers: in normal
    form as it is. Cached: a page's links name a few hosts many times."""
    return len(host) <= MAX_HOST_LENGTH and _PLAIN_HOST.fullmatch(host) is not None


def _normalize(url: str, userinfo: bool) -> str:
    if not isinstance(url, str) or not url:
        raise URLError("is not an http(s) URL")
    scheme, colon, rest = url.partition(":")
    scheme = scheme.lower()
    if not colon or scheme not in SCHEMES:
        raise URLError("is not an http(s) URL")
    if any(ch <= " " or ch == "\x7f" for ch in url):
        raise URLError("has a space or a control character")
    # Browsers and urllib3 end the authority at a backslash as at a slash (urlsplit does not).
    if not rest.startswith("//"):
        raise URLError("is not an http(s) URL (no // after the scheme)")
    rest = rest[2:]
    end = len(rest)
    for delimiter in "/\\?#":
        found = rest.find(delimiter, 0, end)
        if found >= 0:
            end = found
    authority, rest = rest[:end], rest[end:]
    credentials, at, authority = authority.rpartition("@")
    if at and not userinfo:
        raise URLError("has a user name or password before its host")
    if at:
        credentials = _userinfo(credentials)
    host, port = _host_and_port(authority, scheme)
    rest = rest.partition("#")[0]
    path, question, query = rest.partition("?")
    normal = f"{scheme}://{credentials}{at}{host}{port}{_path(path)}"
    if query:
        normal += "?" + _escaped(query, _QUERY_SAFE)
    if len(normal) > MAX_URL_LENGTH:
        raise URLTooLong(normal)
    return normal


def _userinfo(credentials: str) -> str:
    """user[:password] escaped; URLError when either cannot be sent in a Basic Authorization
    header (Latin-1), which is where the client puts them."""
    user, colon, password = credentials.partition(":")
    user, password = _escaped(user, _USERINFO_SAFE), _escaped(password, _USERINFO_SAFE)
    try:  # as requests reads them: unquoted as UTF-8, sent as Latin-1
        (unquote(user) + unquote(password)).encode("latin-1")
    except UnicodeError:
        raise URLError("has a user name or password that is not Latin-1") from None
    return user + colon + password


def _host_and_port(authority: str, scheme: str) -> tuple[str, str]:
    """The host in normal form, and ":port" ("" for none or the scheme's default)."""
    if authority.startswith("["):
        literal, bracket, after = authority[1:].partition("]")
        if not bracket or (after and not after.startswith(":")):
            raise URLError("has a malformed IPv6 address")
        host, port_text = _ipv6(literal), after[1:]
    else:
        name, _, port_text = authority.partition(":")
        host = normal_host(name)
    if not port_text:
        return host, ""
    if not (port_text.isascii() and port_text.isdigit()) or not 0 < int(port_text) <= 65535:
        raise URLError("has a port that is not a number from 1 to 65535")
    port = int(port_text)
    return host, "" if port == DEFAULT_PORTS[scheme] else f":{port}"


def _ipv6(literal: str) -> str:
    if "%" in literal:
        raise URLError("has an IPv6 address with a zone (%)")
    try:
        address = ipaddress.IPv6Address(literal)
    except ValueError:
        raise URLError("has a malformed IPv6 address") from None
    return f"[{address.compressed}]"


@lru_cache(maxsize=4096)
def normal_host(name: str) -> str:
    """A host name or IPv4 address as the client connects to it: percent-escapes decoded,
    IDNA (UTS #46, as browsers and requests map it) to ASCII, lowercase, no trailing dot, an
    IPv4 address in any of the forms resolvers accept ("127.1", "0x7f.0.0.1", "2130706433")
    as four decimal numbers. URLError for what no DNS name or address looks like."""
    if "%" in name:
        try:
            name = _unquote(name)
        except UnicodeDecodeError:
            raise URLError("has a host that is not a valid name or address") from None
    host = ascii_host(name)
    if host is None or not host:
        raise URLError("has no host" if not name else "has a host that is not a valid name")
    if _ends_in_number(host):
        return _ipv4(host)
    if (
        len(host) > MAX_HOST_LENGTH
        or not _HOST_NAME.fullmatch(host)
        or any(len(label) > 63 for label in host.split("."))
    ):
        raise URLError("has a host that is not a valid name or address")
    return host


def _ends_in_number(host: str) -> bool:
    last = host.rpartition(".")[2]
    return bool(last) and (last.isdigit() or bool(_HEX_NUMBER.fullmatch(last)))


def _ipv4(host: str) -> str:
    """The WHATWG IPv4 parser (what inet_aton accepts), to dotted decimal."""
    parts = host.split(".")
    if len(parts) > 4:
        raise URLError("has a host that looks like an IPv4 address but is not one")
    numbers = []
    for part in parts:
        if part[:2].lower() == "0x" and _HEX.issuperset(part[2:]):
            numbers.append(int(part[2:] or "0", 16))
        elif part.startswith("0") and _OCTAL.issuperset(part):
            numbers.append(int(part, 8))
        elif part.isascii() and part.isdigit() and not part.startswith("0"):
            numbers.append(int(part, 10))
        else:
            raise URLError("has a host that looks like an IPv4 address but is not one")
    last = numbers.pop()
    if any(n > 255 for n in numbers) or last >= 256 ** (4 - len(numbers)):
        raise URLError("has a host that looks like an IPv4 address but is not one")
    value = last
    for index, number in enumerate(numbers):
        value += number << (8 * (3 - index))
    return str(ipaddress.IPv4Address(value))


def _path(path: str) -> str:
    """The path with "\\" read as "/", escapes of unreserved characters decoded (so that "%2e"
    is the dot it is to the server), dot segments resolved, the rest escaped."""
    path = path.replace("\\", "/") or "/"
    path = _escaped(path, _PATH_SAFE)
    if "/." not in path:
        return path
    return "/" + "/".join(without_dot_segments(path.split("/")[1:]))


def without_dot_segments(segments: list[str]) -> list[str]:
    """A path's segments with "." and ".." taken out as a browser does (RFC 3986 5.2.4); a
    path that ended in one ends in a "/"."""
    resolved: list[str] = []
    for segment in segments:
        if segment == "..":
            if resolved:
                resolved.pop()
        elif segment != ".":
            resolved.append(segment)
    if segments and segments[-1] in (".", ".."):
        resolved.append("")
    return resolved


def _escaped(text: str, safe: frozenset[str]) -> str:
    """`text` with what is not in `safe` percent-escaped (UTF-8); an escape of an unreserved
    character decoded, the others kept in upper case; a "%" that starts no escape escaped."""
    out = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "%":
            pair = text[i + 1 : i + 3]
            if len(pair) == 2 and pair[0] in _HEX and pair[1] in _HEX:
                decoded = chr(int(pair, 16))
                out.append(decoded if decoded in _UNRESERVED else "%" + pair.upper())
                i += 3
                continue
            out.append("%25")
        elif ch in safe:
            out.append(ch)
        else:
            out.extend(f"%{byte:02X}" for byte in ch.encode("utf-8", "surrogatepass"))
        i += 1
    return "".join(out)


def _unquote(text: str) -> str:
    """Percent-escapes decoded as UTF-8, strictly (UnicodeDecodeError otherwise)."""
    data = bytearray()
    i = 0
    while i < len(text):
        pair = text[i + 1 : i + 3]
        if text[i] == "%" and len(pair) == 2 and pair[0] in _HEX and pair[1] in _HEX:
            data.append(int(pair, 16))
            i += 3
        else:
            data.extend(text[i].encode("utf-8", "surrogatepass"))
            i += 1
    return data.decode("utf-8")


def url_origin(url: str) -> str:
    """url up to the end of its netloc (where urlsplit ends it), or "" when it has control
    characters (which urlsplit would remove) or no "://"."""
    if not (url.isascii() and url.isprintable()):
        return ""
    start = url.find("://")
    if start < 0:
        return ""
    # Per link of every page (scope, hosts): one search in C, not one per delimiter.
    end = _AUTHORITY_END.search(url, start + 3)
    return url[: end.start()] if end else url


def ascii_host(host: str) -> str | None:
    """`host` lowercased, without a trailing dot, IDN labels in punycode; None if not a name."""
    host = host.strip().rstrip(".").lower()
    if host.isascii():
        return host or None
    try:
        # UTS #46 mapping is what browsers (and requests) do before IDNA encoding.
        return idna.encode(host, uts46=True).decode("ascii")
    except (idna.IDNAError, UnicodeError):
        try:
            return host.encode("idna").decode("ascii")  # IDNA 2003, for the odd legacy name
        except UnicodeError:
            return None


def validate_url(url: str, field: str = "url") -> str:
    """`url` (stripped) in normal form, if it is an http(s) URL a crawl can fetch; else
    ValueError naming the field, the URL and what is wrong with it."""
    url = url.strip()
    try:
        return normalize(url)
    except URLError as exc:
        shown = url if len(url) <= 200 else url[:200] + "..."
        raise ValueError(f"{field}: {shown!r} {exc}") from None


def url_problem(url: str, *, userinfo: bool = False) -> str:
    """Why a crawl cannot fetch `url`, in a few words ("not an http(s) URL", "has no host");
    "" when it can."""
    try:
        normalize(url, userinfo=userinfo)
    except URLError as exc:
        return problem_of(exc)
    return ""


def problem_of(error: URLError) -> str:
    """url_problem's words for what normalize() raised."""
    return str(error).removeprefix("is ")


def is_http_url(url: str) -> bool:
    """True for an absolute http(s) URL that normalize() accepts."""
    try:
        normalize(url)
    except URLError:
        return False
    return True
