"""The addresses this process tried to connect to, as Python's own audit event saw them.

"Refused without connecting" was shown by a clock: a blackholed address would have held the
fetch for its whole timeout. On a busy machine the clock also measures the scheduler; the
`socket.connect` audit event (raised by every Python socket's connect, whoever calls it: the
HTTP client, urllib3, a proxy's tunnel) says it directly.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator

_recording: list[list[object]] = []
_lock = threading.Lock()


def _hook(event: str, args: tuple) -> None:
    if event == "socket.connect" and _recording:
        with _lock:
            for addresses in _recording:
                addresses.append(args[1])


# A hook cannot be removed: it is added once per process, and records only inside
# record_connects().
sys.addaudithook(_hook)


@contextlib.contextmanager
def record_connects() -> Iterator[list[object]]:
    """Every address a socket of this process (any thread) connected to while the block ran:
    (host, port) for IPv4, (host, port, flow, scope) for IPv6, a path for a Unix socket."""
    addresses: list[object] = []
    with _lock:
        _recording.append(addresses)
    try:
        yield addresses
    finally:
        with _lock:
            _recording.remove(addresses)


def hosts(addresses: list[object]) -> set[str]:
    """The hosts of recorded addresses (a Unix socket's path as it is)."""
    return {a[0] if isinstance(a, tuple) else str(a) for a in addresses}
