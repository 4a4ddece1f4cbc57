"""A browser's websocket to a live page of a real web server, read by a thread of its own.

    live = LiveSocket.open("10.213.7.1", 8000, "/ws/crawls/4/", cookie="sessionid=...")
    ...
    live.messages  # [(time.monotonic() on arrival, decoded JSON), ...]
    live.close()

A plain socket speaking just enough of RFC 6455 for a server's text frames (unmasked, not
fragmented: what daphne sends) and its pings; no client library needed.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import struct
import threading
import time


class LiveSocket:
    def __init__(self, sock: socket.socket, rest: bytes) -> None:
        self.sock = sock
        self.buffer = rest
        self.messages: list[tuple[float, dict]] = []
        self.closed_by_server = False
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    @classmethod
    def open(
        cls, host: str, port: int, path: str, *, cookie: str, timeout: float = 30
    ) -> LiveSocket:
        sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall(
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            f"Origin: http://{host}:{port}\r\nCookie: {cookie}\r\n\r\n".encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                raise AssertionError(f"the server closed the websocket handshake: {head[:300]!r}")
            head += chunk
        head, _, rest = head.partition(b"\r\n\r\n")
        if b" 101 " not in head.split(b"\r\n")[0]:
            sock.close()
            raise AssertionError(f"websocket refused: {head[:300]!r}")
        sock.settimeout(None)
        return cls(sock, rest)

    def _exactly(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buffer += chunk
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def _read(self) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while True:
                b1, b2 = self._exactly(2)
                n = b2 & 0x7F
                if n == 126:
                    n = struct.unpack(">H", self._exactly(2))[0]
                elif n == 127:
                    n = struct.unpack(">Q", self._exactly(8))[0]
                data = self._exactly(n)
                opcode = b1 & 0x0F
                if opcode == 8:
                    self.closed_by_server = True
                    return
                if opcode == 9:  # a ping: unanswered, daphne closes the socket within 50 s
                    self._send(0xA, data)
                if opcode == 1:
                    self.messages.append((time.monotonic(), json.loads(data)))

    def _send(self, opcode: int, payload: bytes) -> None:
        """One frame from the client: masked, as RFC 6455 wants (payloads under 126 bytes)."""
        mask = os.urandom(4)
        masked = bytes(byte ^ mask[i % 4] for i, byte in enumerate(payload))
        self.sock.sendall(bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + masked)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(timeout=5)
