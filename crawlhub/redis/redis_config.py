"""How every Redis client of crawlhub connects, decided in one place: the client URL.

RQ and django-rq, the frontier and the proxy pool (crawlhub.redis.connections), the channel layer
(channels-redis), cron and RQ's scheduler, the health checks: each is given settings.REDIS_URL
and builds its connection from it with redis-py's from_url, sync or asyncio. So the URL carries
everything a connection needs: the address, the ACL user and password
(rediss://user:password@host:port/0) and, for TLS, the files of REDIS_CA_FILE, REDIS_CERT_FILE
and REDIS_KEY_FILE as the query arguments redis-py passes to its SSL connection (ssl_ca_certs,
ssl_certfile, ssl_keyfile). Child processes inherit the finished URL.

A Redis managed by Sentinel (a primary, its replicas, and sentinels that promote a replica when
the primary dies) is named by REDIS_SENTINELS (host:port,host:port...), REDIS_SENTINEL_SERVICE
(the master's name in the sentinels' configuration) and, when the sentinels want them,
REDIS_SENTINEL_USERNAME and REDIS_SENTINEL_PASSWORD. They go into the client URL's query too
(sentinels=, service=, sentinel_username=, sentinel_password=), and REDIS_URL then gives only
what the Redis servers want: user, password, db and TLS, without a host (redis://user:pw@/0),
since the sentinels say which server is the master. So the same one string still reaches every
client; but redis-py's from_url does not read it: clients get their pool from pool(), RQ its
queue settings from rq_connection(), the channel layer its hosts from channel_layer_hosts().
A sentinel-managed client asks the sentinels for the master when it connects, and again after a
failover: a connection refused by the dead master, or a READONLY answer from a demoted one,
drops the connection, and the next attempt (redis-py's retry, the workers' waiting retry)
reaches the new master.

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
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

import redis
from redis.sentinel import MasterNotFoundError, Sentinel, SentinelConnectionPool

SCHEMES = ("redis://", "rediss://", "unix://")
# The environment variable naming each TLS file -> redis-py's argument for it.
TLS_FILES = {
    "REDIS_CA_FILE": "ssl_ca_certs",
    "REDIS_CERT_FILE": "ssl_certfile",
    "REDIS_KEY_FILE": "ssl_keyfile",
}


# The environment variable naming each Sentinel setting -> its argument in the client URL.
SENTINEL_SETTINGS = {
    "REDIS_SENTINELS": "sentinels",
    "REDIS_SENTINEL_SERVICE": "service",
    "REDIS_SENTINEL_USERNAME": "sentinel_username",
    "REDIS_SENTINEL_PASSWORD": "sentinel_password",
}
# Query arguments that are secrets: masked() hides them.
_SECRET_ARGUMENTS = ("sentinel_password",)
# Readable in logs: a sentinel list keeps its colons and commas.
_QUERY_SAFE = "/:,[]*"


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
    for variable, argument in SENTINEL_SETTINGS.items():
        value = environ.get(variable, "").strip()
        if value:
            query.setdefault(argument, value)
    _check_sentinel_query(url, query)
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
    return _unsplit(parts._replace(query=_encode(query)))


def _encode(query: dict[str, str]) -> str:
    return urlencode(query, quote_via=quote, safe=_QUERY_SAFE)


def _check_sentinel_query(url: str, query: dict[str, str]) -> None:
    """A Sentinel setting goes with the others, and REDIS_URL then names no server."""
    if "sentinels" not in query:
        for variable, argument in SENTINEL_SETTINGS.items():
            if argument in query:
                raise RedisConfigError(
                    f"{variable} is set but REDIS_SENTINELS is not: name the sentinels "
                    "(REDIS_SENTINELS=host:port,host:port,...)"
                )
        return
    parts = urlsplit(url)
    if parts.scheme == "unix" or parts.hostname:
        where_to = parts.path if parts.scheme == "unix" else parts.netloc.rsplit("@", 1)[-1]
        raise RedisConfigError(
            f"REDIS_SENTINELS is set, and REDIS_URL names a server too ({where_to}): with "
            "Sentinel, the sentinels say which server is the master. Give REDIS_URL without a "
            "host, only what the servers want: redis://user:password@/0 (rediss:// for TLS), "
            "or leave it unset"
        )
    sentinel_addresses(query["sentinels"])
    if not query.get("service"):
        raise RedisConfigError(
            "REDIS_SENTINELS is set but REDIS_SENTINEL_SERVICE is not: give the name the "
            "sentinels know the master by (`sentinel monitor NAME host port quorum`)"
        )


def sentinel_addresses(text: str) -> list[tuple[str, int]]:
    """REDIS_SENTINELS ("10.0.0.5:26379,10.0.0.6:26379", [v6]:port too) as (host, port)."""
    addresses = []
    for item in (part.strip() for part in text.split(",")):
        host, _, port = item.rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise RedisConfigError(
                f"REDIS_SENTINELS: {item!r} is not host:port (the list is "
                "host:port,host:port,..., e.g. 10.0.0.5:26379,10.0.0.6:26379)"
            )
        addresses.append((host, int(port)))
    return addresses


def masked(url: str) -> str:
    """The URL with its passwords replaced by ****, for logs and pages."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    secrets = [name for name in _SECRET_ARGUMENTS if name in query]
    if parts.password is None and not secrets:
        return url
    if secrets:
        parts = parts._replace(query=_encode({**query, **dict.fromkeys(secrets, "****")}))
    if parts.password is not None:
        user = parts.username or ""
        host = parts.netloc.rsplit("@", 1)[1]
        parts = parts._replace(netloc=f"{user}:****@{host}")
    return _unsplit(parts)


def _unsplit(parts) -> str:
    """urlunsplit, keeping the // of a URL without a host (redis://:password@/0, redis:///0)."""
    query = f"?{parts.query}" if parts.query else ""
    fragment = f"#{parts.fragment}" if parts.fragment else ""
    return f"{parts.scheme}://{parts.netloc}{parts.path}{query}{fragment}"


def is_sentinel(url: str) -> bool:
    return "sentinels" in dict(parse_qsl(urlsplit(url).query))


def _tls_arguments(url: str) -> dict:
    """What a TLS connection of this URL wants (ssl and the files), {} for a plain one."""
    parts = urlsplit(url)
    if parts.scheme != "rediss":
        return {}
    query = dict(parse_qsl(parts.query))
    return {"ssl": True, **{arg: query[arg] for arg in TLS_FILES.values() if arg in query}}


def _sentinel_parts(url: str) -> tuple[list[tuple[str, int]], str, dict, dict]:
    """(sentinels, service, arguments for a sentinel, arguments for the master) of a Sentinel
    client URL. The sentinels are reached as the servers are: TLS with rediss://."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    tls = _tls_arguments(url)
    db = parts.path.strip("/") or query.get("db", "0")
    master = {
        "username": unquote(parts.username) if parts.username else None,
        "password": unquote(parts.password) if parts.password is not None else None,
        "db": int(db),
        **tls,
    }
    sentinel = {
        "username": query.get("sentinel_username") or None,
        "password": query.get("sentinel_password") or None,
        **tls,
    }
    return sentinel_addresses(query["sentinels"]), query["service"], sentinel, master


def pool(url: str, **options) -> redis.ConnectionPool:
    """A connection pool on the Redis of a client URL (options: socket_timeout...): on the
    master the sentinels name, for a Sentinel URL; else redis-py's from_url."""
    if not is_sentinel(url):
        return redis.ConnectionPool.from_url(url, **options)
    sentinels, service, sentinel_kwargs, master = _sentinel_parts(url)
    timeouts = {k: v for k, v in options.items() if k.startswith("socket_")}
    manager = Sentinel(sentinels, sentinel_kwargs={**timeouts, **sentinel_kwargs})
    return SentinelConnectionPool(service, manager, **master, **options)


def client(url: str, **options) -> redis.Redis:
    """A client of its own on the Redis of url (close it with close())."""
    return redis.Redis(connection_pool=pool(url, **options))


def close(connection: redis.Redis) -> None:
    """Close a client() and its pool (a pool given to Redis() stays open on close())."""
    connection.close()
    connection.connection_pool.disconnect()


def rq_connection(url: str) -> dict:
    """RQ_QUEUES' connection settings for a client URL (django-rq: URL, or SENTINELS)."""
    if not is_sentinel(url):
        return {"URL": url}
    sentinels, service, sentinel_kwargs, master = _sentinel_parts(url)
    db, username, password = master.pop("db"), master.pop("username"), master.pop("password")
    return {
        "SENTINELS": sentinels,
        "MASTER_NAME": service,
        "DB": db,
        "USERNAME": username,
        "PASSWORD": password,
        "SENTINEL_KWARGS": sentinel_kwargs,
        "CONNECTION_KWARGS": master,  # TLS
    }


def channel_layer_hosts(url: str) -> list[dict]:
    """channels-redis hosts for a client URL. redis-py 8 reads with a 5 s socket timeout by
    default, exactly as long as channels-redis blocks waiting for a message, so an idle
    websocket could die with "Timeout reading" (redis/redis-py#4091): give it 30 s."""
    if not is_sentinel(url):
        return [{"address": url, "socket_timeout": 30}]
    sentinels, service, sentinel_kwargs, master = _sentinel_parts(url)
    return [
        {
            "sentinels": sentinels,
            "master_name": service,
            "sentinel_kwargs": {"socket_timeout": 5, **sentinel_kwargs},
            "socket_timeout": 30,
            **master,
        }
    ]


def where(url: str) -> str:
    """Where the URL points, in words: "10.0.0.5:6379 (TLS, user crawler, db 0)" or "the unix
    socket /run/redis.sock"."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return f"the unix socket {parts.path}"
    query = dict(parse_qsl(parts.query))
    db = parts.path.strip("/") or query.get("db", "0")
    tls = "TLS, " if parts.scheme == "rediss" else ""
    user = f"user {parts.username}, " if parts.username else ""
    if "sentinels" in query:
        listed = ", ".join(
            f"[{h}]:{p}" if ":" in h else f"{h}:{p}"
            for h, p in sentinel_addresses(query["sentinels"])
        )
        return f"the master {query['service']!r} of the sentinels {listed} ({tls}{user}db {db})"
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
    connection = client(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    try:
        connection.ping()
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
    except MasterNotFoundError:
        raise RedisUnreachable(
            f"no sentinel named the master: asked for {where(url)}; {_sentinels_why(url, timeout)}"
        ) from None
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        raise RedisUnreachable(f"Redis at {where(url)} does not answer: {_why(url, exc)}") from None
    finally:
        close(connection)


def _sentinels_why(url: str, timeout: float) -> str:
    """What each sentinel of url says when asked for the master, in words."""
    addresses, service, sentinel_kwargs, _ = _sentinel_parts(url)
    answers = []
    for host, port in addresses:
        sentinel = redis.Redis(
            host, port, socket_timeout=timeout, socket_connect_timeout=timeout, **sentinel_kwargs
        )
        try:
            state = sentinel.sentinel_masters().get(service)
            if state is None:
                why = f"knows no master named {service!r} (REDIS_SENTINEL_SERVICE)"
            else:
                why = f"says {service!r} at {state['ip']}:{state['port']} is down"
        except redis.AuthenticationError:
            why = "refused the sentinel password (REDIS_SENTINEL_PASSWORD)"
        except redis.ResponseError as exc:
            why = f"refused: {exc} (REDIS_SENTINEL_PASSWORD, REDIS_SENTINEL_USERNAME)"
        except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
            why = f"does not answer: {_why(url, exc)}"
        finally:
            sentinel.close()
        answers.append(f"{host}:{port} {why}")
    return "; ".join(answers)


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
