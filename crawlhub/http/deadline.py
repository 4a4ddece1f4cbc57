"""The whole-fetch deadline while a response head is awaited (session.py's connections honour it).

The (connect, read) timeouts restart on every byte, so a server that trickles its status line
and headers would otherwise hold a fetch thread (and the slice waiting for it) for as long as it
liked. A fetch arms its deadline for its thread (arm/disarm) around each send; the connections
of session.py's pools hand themselves to one watchdog thread while they wait for the head,
and the watchdog shuts the socket of any still waiting at its deadline. The body is bounded by
the client itself, between reads.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time

import urllib3
import urllib3.connection
import urllib3.response

_deadlines = threading.local()  # .value: the running fetch's deadline, in this thread


def arm(deadline: float) -> None:
    """Cut this thread's next wait for a response head at `deadline` (time.monotonic())."""
    _deadlines.value = deadline


def disarm() -> None:
    _deadlines.value = None


def set_socket_timeout(raw: urllib3.response.HTTPResponse, timeout: float) -> None:
    """Shrink the socket timeout for the next read (urllib3 resets it when reusing a socket).

    A socket already at `timeout` is left alone: settimeout is a system call each time, and
    until the deadline is nearer than the usual timeout every read asks for the same one (the
    one urllib3 set for the request)."""
    sock = getattr(raw.connection, "sock", None)
    if sock is not None and sock.gettimeout() != timeout:
        sock.settimeout(timeout)


class _Watchdog:
    """Shuts the socket of a fetch still waiting for its response head after its deadline.

    One thread per process, started when first needed; a forked worker (RQ forks one per job)
    starts afresh: it inherits neither the thread nor, safely, a lock another thread held at
    the fork.
    """

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self.cond = threading.Condition()
        self.watched: dict[int, tuple[float, urllib3.connection.HTTPConnection]] = {}
        self.wake_at = 0.0  # when the thread next looks; woken early only for a sooner deadline
        self.started = False

    def watch(self, conn: urllib3.connection.HTTPConnection, deadline: float) -> None:
        with self.cond:
            if not self.started:
                self.started = True
                threading.Thread(target=self._run, name="fetch-watchdog", daemon=True).start()
            self.watched[id(conn)] = (deadline, conn)
            if deadline < self.wake_at:
                self.cond.notify()

    def unwatch(self, conn: urllib3.connection.HTTPConnection) -> None:
        with self.cond:
            self.watched.pop(id(conn), None)

    def _run(self) -> None:
        with self.cond:
            while True:
                now = time.monotonic()
                for key, (deadline, conn) in list(self.watched.items()):
                    if deadline <= now:
                        del self.watched[key]
                        _shut(conn)
                self.wake_at = min((d for d, _ in self.watched.values()), default=now + 60)
                self.cond.wait(timeout=max(0.01, self.wake_at - now))


def _shut(conn: urllib3.connection.HTTPConnection) -> None:
    """Wake a thread blocked reading conn: its recv returns as if the server had closed."""
    sock = getattr(conn, "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


_WATCHDOG = _Watchdog()


class Watched:
    """An HTTP(S) connection whose wait for a response head ends at the fetch's deadline."""

    def getresponse(self, *args, **kwargs):
        deadline = getattr(_deadlines, "value", None)
        if deadline is None:
            return super().getresponse(*args, **kwargs)
        _WATCHDOG.watch(self, deadline)
        try:
            return super().getresponse(*args, **kwargs)
        finally:
            _WATCHDOG.unwatch(self)
