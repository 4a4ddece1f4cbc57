"""The requests.Session the client fetches with: connections that honour the whole-fetch
deadline (deadline.py) and, made directly, the private-network guard at connection time; a
cookie jar that binds a site's cookies to the scheme and port that set them.

The guard (netguard.py) is asked for every URL before it is fetched, which gives a refusal in
words before any work is done (a crawl asks before reading robots.txt). That check resolves the
name itself; the socket then resolves it again, and a DNS server may answer differently the
second time (rebinding). So a direct connection resolves its host once, here, and asks the
guard about each address before connecting to it: whatever a URL or a DNS server says, the
socket never reaches an address the guard refuses. Connections to a proxy are the operator's
choice and are not checked; the URL asked of the proxy is (client.py).
"""

from __future__ import annotations

import contextlib
import http.cookiejar
import socket
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from operator import itemgetter
from urllib.parse import urlsplit

import requests
import urllib3
import urllib3.connection
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict
from requests.utils import check_header_validity, get_encoding_from_headers
from urllib3 import HTTPHeaderDict
from urllib3.contrib.socks import SOCKSConnection, SOCKSHTTPSConnection, SOCKSProxyManager
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError
from urllib3.util.connection import allowed_gai_family
from urllib3.util.timeout import _DEFAULT_TIMEOUT

from crawlhub.http import heads, netguard
from crawlhub.http.deadline import Watched
from crawlhub.http.urls import DEFAULT_PORTS, url_origin

_exempt = threading.local()  # .value: this thread's next connections skip the guard


@contextlib.contextmanager
def unguarded() -> Iterator[None]:
    """Connections made in this thread, inside the block, are not checked: for the operator's
    own URL only (a proxy check of PROXY_CHECK_URL, on loopback by default)."""
    _exempt.value = True
    try:
        yield
    finally:
        _exempt.value = False


def new_session(pool_size: int) -> requests.Session:
    """A requests.Session whose connections (direct and through proxies) honour arm(), and
    whose direct connections are checked by the guard."""
    session = requests.Session()
    # No proxies, .netrc or CA bundle from the environment: a fetch's behaviour must not
    # depend on the shell the process happened to start in; proxies come per request.
    session.trust_env = False
    session.cookies.set_policy(OriginBoundCookies())
    adapter = _Adapter(pool_connections=pool_size, pool_maxsize=pool_size, max_retries=0)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


class OriginBoundCookies(http.cookiejar.DefaultCookiePolicy):
    """Cookies a site sets go back to the scheme and port that set them, as browsers that bind
    cookies to origins do: a cookie of http://host:8000 never reaches http://host:9000 (another
    service on the same machine) nor https://host. Domain and path rules are the standard ones.
    """

    _KEY = "crawlhub-origin"

    def set_ok(self, cookie: http.cookiejar.Cookie, request) -> bool:
        if not super().set_ok(cookie, request):
            return False
        cookie._rest[self._KEY] = _scheme_and_port(request.get_full_url())
        return True

    def return_ok(self, cookie: http.cookiejar.Cookie, request) -> bool:
        origin = cookie._rest.get(self._KEY)
        if origin is not None and origin != _scheme_and_port(request.get_full_url()):
            return False
        return super().return_ok(cookie, request)


def _scheme_and_port(url: str) -> str:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{parts.scheme}:{port or DEFAULT_PORTS.get(parts.scheme, 0)}"


def connect(host: str, port: int, timeout, source_address, socket_options) -> socket.socket:
    """urllib3's create_connection, with the guard asked about each address it resolved,
    before connecting to it (netguard.BlockedAddress, not an OSError: no retry helps)."""
    name = host.strip("[]")
    error: OSError | None = None
    check = not getattr(_exempt, "value", False) and netguard.enabled()
    for family, kind, proto, _, address in socket.getaddrinfo(
        name, port, allowed_gai_family(), socket.SOCK_STREAM
    ):
        if check:
            netguard.check_address(address[0], port, name)
        sock = socket.socket(family, kind, proto)
        try:
            for option in socket_options or ():
                sock.setsockopt(*option)
            if timeout is not _DEFAULT_TIMEOUT:
                sock.settimeout(timeout)
            if source_address:
                sock.bind(source_address)
            sock.connect(address)
            return sock
        except OSError as exc:
            error = exc
            sock.close()
    raise error if error is not None else OSError("getaddrinfo returns an empty list")


class _Guarded:
    """A direct HTTP(S) connection that connects only to addresses the guard lets through."""

    def _new_conn(self) -> socket.socket:
        try:
            sock = connect(
                self._dns_host, self.port, self.timeout, self.source_address, self.socket_options
            )
        except socket.gaierror as exc:
            raise NameResolutionError(self.host, self, exc) from exc
        except TimeoutError as exc:
            raise ConnectTimeoutError(
                self, f"Connection to {self.host} timed out. (connect timeout={self.timeout})"
            ) from exc
        except OSError as exc:
            raise NewConnectionError(self, f"Failed to establish a new connection: {exc}") from exc
        sys.audit("http.client.connect", self, self.host, self.port)
        return sock


class _Connection(Watched):
    """What each connection of the session's pools is, direct, proxied or through SOCKS: it
    waits for a response head no longer than the fetch's deadline (deadline.py), and reads the
    head's headers without the email package when they are plain (heads.py)."""

    response_class = heads.Response


class _DirectHTTPConnection(_Guarded, _Connection, urllib3.connection.HTTPConnection):
    pass


class _DirectHTTPSConnection(_Guarded, _Connection, urllib3.connection.HTTPSConnection):
    pass


class _DirectHTTPPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _DirectHTTPConnection


class _DirectHTTPSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _DirectHTTPSConnection


class _ProxiedHTTPConnection(_Connection, urllib3.connection.HTTPConnection):
    pass


class _ProxiedHTTPSConnection(_Connection, urllib3.connection.HTTPSConnection):
    pass


class _ProxiedHTTPPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _ProxiedHTTPConnection


class _ProxiedHTTPSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _ProxiedHTTPSConnection


# Through a SOCKS proxy (socks5://, socks5h://): the same, on urllib3's SOCKS connections.
class _SOCKSConnection(_Connection, SOCKSConnection):
    pass


class _SOCKSHTTPSConnection(_Connection, SOCKSHTTPSConnection):
    pass


class _SOCKSHTTPPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _SOCKSConnection


class _SOCKSHTTPSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _SOCKSHTTPSConnection


_DIRECT_POOLS = {"http": _DirectHTTPPool, "https": _DirectHTTPSPool}
_PROXIED_POOLS = {"http": _ProxiedHTTPPool, "https": _ProxiedHTTPSPool}
_SOCKS_POOLS = {"http": _SOCKSHTTPPool, "https": _SOCKSHTTPSPool}


class _Adapter(HTTPAdapter):
    """requests' adapter with connections that honour the whole-fetch deadline, direct and
    through proxies, HTTP or SOCKS; direct ones checked by the guard as they connect."""

    def init_poolmanager(self, *args, **kwargs) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _DIRECT_POOLS
        self._pools: dict[tuple, urllib3.HTTPConnectionPool] = {}

    def get_connection_with_tls_context(self, request, verify, proxies=None, cert=None):
        """requests' pool for the request, remembered: requests parses the URL and the proxy
        and builds urllib3's pool key again for every request, a tenth of a plain fetch's time
        in Python. The pool depends only on the URL's origin (url_origin: scheme, userinfo,
        host and port as written), the proxies, verify and cert. At most as many are remembered
        as the manager keeps (pool_connections), forgotten all at once past that; a pool closed
        since (the adapter's close) is looked up again."""
        origin = url_origin(request.url)
        if not origin:
            return super().get_connection_with_tls_context(request, verify, proxies, cert)
        key = (origin, tuple(proxies.items()) if proxies else (), verify, cert)
        pool = self._pools.get(key)
        if pool is None or pool.pool is None:
            pool = super().get_connection_with_tls_context(request, verify, proxies, cert)
            if len(self._pools) >= self._pool_connections:
                self._pools.clear()
            self._pools[key] = pool
        return pool

    def request_url(self, request, proxies) -> str:
        """What the request line names: requests' choice (the whole URL through an HTTP
        proxy, else the path and query), without its three parses of the URL for a request
        sent directly: the path and query are what follows the URL's origin."""
        url = request.url
        if proxies or not url.startswith(("http://", "https://")):
            return super().request_url(request, proxies)
        origin = url_origin(url)
        if not origin:
            return super().request_url(request, proxies)
        path, _, query = url[len(origin) :].partition("#")[0].partition("?")
        return (path or "/") + ("?" + query if query else "")

    def build_response(self, req, resp) -> requests.Response:
        """requests' response, without parsing the cookies of a response that sets none (that
        makes a mock request and response per fetch). The Fetcher keeps the cookies a response
        sets in its session's jar itself (client.py)."""
        if "Set-Cookie" in resp.headers:
            return super().build_response(req, resp)
        response = requests.Response()
        response.status_code = resp.status
        response.headers = case_insensitive(resp.headers)
        response.encoding = get_encoding_from_headers(response.headers)
        response.raw = resp
        response.reason = resp.reason
        response.url = req.url.decode("utf-8") if isinstance(req.url, bytes) else req.url
        response.request = req
        response.connection = self
        return response

    def proxy_manager_for(self, proxy, **proxy_kwargs):
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        socks = isinstance(manager, SOCKSProxyManager)
        manager.pool_classes_by_scheme = _SOCKS_POOLS if socks else _PROXIED_POOLS
        return manager


def case_insensitive(headers: Mapping[str, str]) -> CaseInsensitiveDict:
    """CaseInsensitiveDict(headers), as requests makes a response's: each name as first
    written, its values joined by ", ", in order. From urllib3's HTTPHeaderDict, which keeps
    them so already, it is made at once: requests copies them one by one through both classes'
    item methods, ~60 bytecode instructions a header (tests/http/test_fetching.py compares)."""
    if type(headers) is not HTTPHeaderDict:
        return CaseInsensitiveDict(headers)
    grouped = headers._container  # {lowercase name: [name as first written, *values]}
    values = grouped.values()
    copied = CaseInsensitiveDict()
    copied._store = OrderedDict(
        zip(
            grouped,
            zip(map(_FIRST, values), map(", ".join, map(_REST, values)), strict=True),
            strict=True,
        )
    )
    return copied


_FIRST = itemgetter(0)
_REST = itemgetter(slice(1, None))


class PreparedHeaders:
    """A Fetcher's own request headers (the session's, and a User-Agent) as requests prepares
    them (checked, in a CaseInsensitiveDict, in order), prepared once and copied for each
    request: checking and copying them one by one is ~400 bytecode instructions a fetch. Each
    User-Agent is checked by requests' own check, once (a Fetcher has one, or one of a few);
    one it refuses is refused every time, as prepare_headers would."""

    MAX_CHECKED = 256  # User-Agents remembered as checked; a Fetcher has at most ~30

    def __init__(self, headers: Mapping[str, str]) -> None:
        first = requests.PreparedRequest()
        first.prepare_headers({**headers, "User-Agent": ""})
        self._store = first.headers._store  # {lowercase name: (name, value)}
        self._checked: set[str] = set()

    def with_user_agent(self, agent: str) -> CaseInsensitiveDict:
        """prepare_headers({**headers, "User-Agent": agent})'s headers, this request's own."""
        if agent not in self._checked:
            check_header_validity(("User-Agent", agent))  # InvalidHeader, as prepare_headers
            if len(self._checked) < self.MAX_CHECKED:
                self._checked.add(agent)
        store = OrderedDict(self._store)  # its values are tuples: copying the dict suffices
        store["user-agent"] = ("User-Agent", agent)
        headers = CaseInsensitiveDict()
        headers._store = store
        return headers


def prepare_without_cookies(
    prepared: requests.PreparedRequest,
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes | None,
    *,
    checked: bool = False,
) -> None:
    """PreparedRequest.prepare's steps but its cookies', for a session whose jar is empty:
    asking an empty jar for a Cookie header takes its lock and its policy's clock, per page.
    `url` is in normal form (urls.normalize: _follow sends nothing else), which requests
    prepares unchanged (test_every_reader_reads_the_normal_form_alike holds it): it is taken
    as it is, not parsed twice more; only one with a user name (a proxy's) has auth to take."""
    prepared.prepare_method(method)
    prepared.url = url
    if checked:  # prepared by requests already (PreparedHeaders), and this request's own copy
        prepared.headers = headers
    else:
        prepared.prepare_headers(headers)
    prepared.prepare_body(body, None, None)
    if "@" in url:
        prepared.prepare_auth(None, url)
    prepared.prepare_hooks({})
