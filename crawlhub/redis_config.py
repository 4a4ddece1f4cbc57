"""How every Redis client of crawlhub connects, decided in one place: the client URL.

RQ and django-rq, the frontier and the proxy pool (crawlhub.connections), the channel layer
(channels-redis), cron and RQ's scheduler, the health checks: each is given settings.REDIS_URL
and builds its connection from it with redis-py's from_url, sync or asyncio. So the URL carries
everything a connection needs: the address, the ACL user and password
(rediss://user:password@host:port/0) and, for TLS, the files of REDIS_CA_FILE, REDIS_CERT_FILE
and REDIS_KEY_FILE as the query arguments redis-py passes to its SSL connection (ssl_ca_certs,
ssl_certfile, ssl_keyfile). Child processes inherit the finished URL.

A URL with a password is shown only through masked(). check() says, in words, why a Redis does
not answer: no socket file here, nobody listening, TLS or credentials refused.

This module must not import Django settings: settings import it.
"""

from __future__ import annotations

import os
import socket
import ssl
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import redis

SCHEMES = ("redis://", "rediss://", "unix://")
# The environment variable naming each TLS file -> redis-py's argument for it.
TLS_FILES = {
    "REDIS_CA_FILE": "ssl_ca_certs",
    "REDIS_CERT_FILE": "ssl_certfile",
    "REDIS_KEY_FILE": "ssl_keyfile",
}


class RedisConfigError(ValueError):
    """REDIS_URL or a REDIS_*_FILE setting cannot be used; the message says which and why."""


class RedisUnreachable(RuntimeError):
    """The Redis of REDIS_URL did not answer a PING; the message says where and why."""


def client_url(url: str, environ: Mapping[str, str] | None = None) -> str:
    """REDIS_URL with the TLS files of the environment in its query, checked. A file already
    named in the URL's query is kept (a child process gets the finished URL)."""
    environ = os.environ if environ is None else environ
    if not url.startswith(SCHEMES):
        raise RedisConfigError(
            f"REDIS_URL must start with redis://, rediss:// or unix://, got {masked(url)!r}"
        )
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    for variable, argument in TLS_FILES.items():
        path = environ.get(variable, "").strip()
        if not path:
            continue
        if parts.scheme != "rediss":
            raise RedisConfigError(
                f"{variable} is set but REDIS_URL is not a TLS address: use rediss://host:port "
                f"(got {masked(url)!r})"
            )
        query.setdefault(argument, path)
    for variable, argument in TLS_FILES.items():
        if argument in query and not Path(query[argument]).is_file():
            raise RedisConfigError(f"{variable}={query[argument]}: no such file on this machine")
    if ("ssl_certfile" in query) != ("ssl_keyfile" in query):
        raise RedisConfigError(
            "REDIS_CERT_FILE and REDIS_KEY_FILE go together (a client certificate and its key)"
        )
    if query == dict(parse_qsl(parts.query)):
        return url
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote, safe="/")))


def masked(url: str) -> str:
    """The URL with its password replaced by ****, for logs and pages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{user}:****@{host}"))


def where(url: str) -> str:
    """Where the URL points, in words: "10.0.0.5:6379 (TLS, user crawler, db 0)" or "the unix
    socket /run/redis.sock"."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return f"the unix socket {parts.path}"
    db = parts.path.strip("/") or dict(parse_qsl(parts.query)).get("db", "0")
    tls = "TLS, " if parts.scheme == "rediss" else ""
    user = f"user {parts.username}, " if parts.username else ""
    return f"{parts.hostname}:{parts.port or 6379} ({tls}{user}db {db})"


def check(url: str, *, timeout: float = 5.0) -> None:
    """PING the Redis at url; RedisUnreachable saying what went wrong and where."""
    parts = urlsplit(url)
    here = socket.gethostname()
    if parts.scheme == "unix" and not Path(parts.path).exists():
        raise RedisUnreachable(
            f"REDIS_URL names the unix socket {parts.path}, which does not exist on this machine "
            f"({here}): a Redis on another machine is reached at redis://host:port or "
            "rediss://host:port"
        )
    client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    try:
        client.ping()
    except redis.AuthenticationError as exc:
        raise RedisUnreachable(
            f"Redis at {where(url)} refused the credentials in REDIS_URL ({exc}): check the "
            "user and password (rediss://user:password@host:port/0, the password URL-encoded)"
        ) from None
    except redis.ResponseError as exc:
        if "NOAUTH" not in str(exc) and "NOPERM" not in str(exc):
            raise
        raise RedisUnreachable(
            f"Redis at {where(url)} wants a password (or a user allowed to PING): {exc}; put "
            "them in REDIS_URL as redis://user:password@host:port/0"
        ) from None
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        raise RedisUnreachable(f"Redis at {where(url)} does not answer: {_why(url, exc)}") from None
    finally:
        client.close()


def _why(url: str, exc: Exception) -> str:
    text = str(exc)
    cause = exc.__cause__ or exc.__context__
    tls = urlsplit(url).scheme == "rediss"
    if isinstance(cause, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in text:
        return (
            f"its TLS certificate was not trusted ({text}): set REDIS_CA_FILE to the CA "
            "certificate that signed it"
        )
    if tls and ("SSL" in text or isinstance(cause, ssl.SSLError)):
        return (
            f"the TLS handshake failed ({text}): is it a TLS port (tls-port), and does it "
            "want a client certificate (REDIS_CERT_FILE, REDIS_KEY_FILE)?"
        )
    if not tls and ("Connection reset" in text or "Connection closed by server" in text):
        return (
            f"{text}: the connection was dropped at once, as a TLS-only Redis does; "
            "use rediss:// and REDIS_CA_FILE"
        )
    return text
