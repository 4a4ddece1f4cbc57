"""The browsers' own connections, guarded: a CONNECT proxy on loopback in each worker's
rendering loop, for what a rendered page makes Chromium connect to itself.

A rendered page's requests are sent by crawlhub's client (render_routing.py), whose session
checks the address each socket connects to (session.py). A WebSocket cannot be handed over
that way: Chromium opens it. Asking the guard about its URL first is not enough, since
Chromium resolves the name again (a DNS server that answers a public address the first time
and a private one the second gets past that), and Chromium's own checks of public pages
reaching local ones act after the connection is made. So a browser context without a proxy
of the crawl's is given this one: for each CONNECT it resolves the name once, asks the guard
(netguard.check_address) about the very address it then connects to, and refuses with 403
naming the address otherwise. It answers nothing but CONNECT (the pages' other requests never
reach it: the context's route sends them to the client), on loopback only. It asks no password:
Chromium does not answer a proxy's 407 for a WebSocket (Playwright answers it for requests
only), and any process of this machine that could use it can connect to those addresses itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket

from crawlhub.http import netguard

log = logging.getLogger(__name__)

# A browser's CONNECT head arrives at once; a connection that sends none is dropped.
HEAD_SECONDS = 10.0
HEAD_BYTES = 16 * 1024
CONNECT_SECONDS = 10.0
CHUNK = 64 * 1024


class GuardProxy:
    """One per rendering loop: start() on that loop, then settings() for a browser context."""

    def __init__(self) -> None:
        self._server: asyncio.Server | None = None
        self._tunnels: set[asyncio.Task] = set()
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._client, "127.0.0.1", 0, limit=HEAD_BYTES)
        self.port = self._server.sockets[0].getsockname()[1]

    def settings(self) -> dict[str, str]:
        """Playwright's proxy option for a context that has no proxy of the crawl's."""
        return {"server": f"http://127.0.0.1:{self.port}"}

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
        for task in list(self._tunnels):
            task.cancel()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tunnels.add(task)
        try:
            await self._serve(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        finally:
            self._tunnels.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_SECONDS)
        lines = head.decode("latin-1").split("\r\n")
        method, _, rest = lines[0].partition(" ")
        target = rest.partition(" ")[0]
        if method != "CONNECT":
            await _answer(writer, "405 Method Not Allowed")
            return
        host, port = _host_and_port(target)
        if host is None:
            await _answer(writer, "400 Bad Request")
            return
        try:
            upstream_reader, upstream_writer = await self._connect(host, port)
        except netguard.BlockedAddress as exc:
            log.info("a rendered page's connection to %s:%s refused: %s", host, port, exc)
            await _answer(writer, "403 Forbidden", body=f"blocked: {exc}")
            return
        except (OSError, TimeoutError) as exc:
            await _answer(writer, "502 Bad Gateway", body=f"{type(exc).__name__}: {exc}")
            return
        await _answer(writer, "200 Connection Established")
        try:
            await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))
        finally:
            upstream_writer.close()

    async def _connect(
        self, host: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to the first address of `host`, each address asked of the guard
        before it is tried: the address connected to is the address checked."""
        loop = asyncio.get_running_loop()
        infos = await asyncio.wait_for(
            loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), CONNECT_SECONDS
        )
        failure: OSError | None = None
        for _family, _type, _proto, _name, address in infos:
            netguard.check_address(address[0], port, host)
            try:
                return await asyncio.wait_for(
                    asyncio.open_connection(address[0], port), CONNECT_SECONDS
                )
            except OSError as exc:
                failure = exc
        raise failure or OSError(f"{host} has no address")


def _host_and_port(target: str) -> tuple[str | None, int]:
    """'host:port' or '[v6]:port' of a CONNECT; (None, 0) for anything else."""
    if target.startswith("["):
        host, _, port = target[1:].partition("]")
        port = port.removeprefix(":")
    else:
        host, _, port = target.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None, 0
    return host, int(port)


async def _answer(writer: asyncio.StreamWriter, status: str, *, body: str = "") -> None:
    data = body.encode("utf-8", "replace")
    writer.write(
        f"HTTP/1.1 {status}\r\nContent-Length: {len(data)}\r\n\r\n".encode("latin-1") + data
    )
    await writer.drain()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Bytes one way until either side ends; then the other side is told."""
    try:
        while chunk := await reader.read(CHUNK):
            writer.write(chunk)
            await writer.drain()
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()
            else:
                writer.close()
