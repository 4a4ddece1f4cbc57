"""A response body read within its limits: at most max_bytes of decoded body, and as little
memory and time as that takes, whatever the server sends.

The client reads the raw bytes and undoes gzip and deflate here, rather than letting urllib3 do
it: urllib3 caps what one read decodes, but inside that read it keeps pulling compressed bytes
from the socket for as long as they decode to nothing (a stream of empty deflate blocks), and
it keeps the deflate bytes it has not decoded yet in memory. Neither the fetch's deadline nor a
size limit is checked meanwhile. Here:
- every network read goes through one place (_Wire), which checks the deadline first and
  stops once the body's raw size is past what max_bytes of decoded body can need;
- every decoding step yields at most what is asked for (zlib's max_length), so a gzip bomb is
  decoded one chunk at a time and stops at max_bytes;
- the body is written once, into a buffer that getvalue() hands over without a copy.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import urllib3

CHUNK = 64 * 1024
# Chained codings ("gzip, gzip") past this many are refused, as urllib3 does.
MAX_CODINGS = 5
_IDENTITY = frozenset({"", "identity"})
_GZIP = frozenset({"gzip", "x-gzip"})


class DecodeError(ValueError):
    """The body does not decode as its Content-Encoding says."""


@dataclass
class Body:
    data: bytes
    truncated: bool  # there was more than max_bytes (decoded, or raw): cut there
    wire_bytes: int  # raw body bytes received (compressed size when compressed)
    error: Exception | None = None  # why the body stopped early; `data` is what came before


def wire_limit(max_bytes: int) -> int:
    """Raw bytes read at most for max_bytes of decoded body. Compressed data that is bigger than
    what it decodes to (stored deflate blocks: 5 bytes per 64 KiB; empty blocks: only overhead)
    gets 1 % and a chunk of room; a body past that is cut as if it were too big."""
    return max_bytes + max_bytes // 100 + CHUNK


def read(
    raw: urllib3.response.HTTPResponse,
    *,
    max_bytes: int,
    content_encoding: str,
    before_read: Callable[[], None],
) -> Body:
    """Up to max_bytes of `raw`'s body, decoded. `before_read` runs before every network read:
    it sets the socket timeout, or raises when the fetch's deadline has passed. What stopped
    the body early is its error: what before_read raised, DecodeError for a body that does not
    decode, or what `raw` raises for a broken stream."""
    wire = _Wire(raw, wire_limit(max_bytes), before_read)
    buffer = io.BytesIO()
    size, truncated, error = 0, False, None
    try:
        source: _Source = wire
        for coding in _codings(content_encoding):
            source = _Inflate(source, gzip=coding in _GZIP)
        while True:
            # One byte past the limit says whether the body goes on; it is never kept.
            chunk = source.read(min(CHUNK, max_bytes + 1 - size))
            if not chunk:
                truncated = wire.cut
                break
            if size + len(chunk) > max_bytes:
                buffer.write(chunk[: max_bytes - size])
                truncated = True
                break
            buffer.write(chunk)
            size += len(chunk)
    except Exception as exc:  # handed to the caller, with what came before it
        error = exc
    return Body(data=buffer.getvalue(), truncated=truncated, wire_bytes=wire.count, error=error)


def _codings(content_encoding: str) -> list[str]:
    """The codings to undo, the last applied first. Decoding stops at a coding it does not know
    (br, zstd, compress: never asked for), leaving the body as that coding made it."""
    codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip()]
    codings = [c for c in codings if c not in _IDENTITY]
    if len(codings) > MAX_CODINGS:
        raise DecodeError(f"more than {MAX_CODINGS} content codings: {content_encoding[:100]!r}")
    known = []
    for coding in reversed(codings):
        if coding not in _GZIP and coding != "deflate":
            break
        known.append(coding)
    return known


class _Source:
    def read(self, limit: int) -> bytes:
        """Up to `limit` (> 0) bytes; b"" only at the end."""
        raise NotImplementedError


class _Wire(_Source):
    """The raw body, one socket read at a time, up to `limit` bytes."""

    def __init__(
        self, raw: urllib3.response.HTTPResponse, limit: int, before_read: Callable[[], None]
    ) -> None:
        self.raw = raw
        self.limit = limit
        self.before_read = before_read
        self.count = 0
        self.cut = False  # stopped at the limit with more to come

    def read(self, limit: int) -> bytes:
        if self.count >= self.limit:
            self.cut = True
            return b""
        self.before_read()
        # read1: one socket read, so that before_read runs between trickled bytes.
        data = self.raw.read1(min(limit, self.limit - self.count), decode_content=False)
        self.count += len(data)
        return data


class _Inflate(_Source):
    """gzip (one member after another, as browsers read them) or deflate (zlib-wrapped, or raw
    as some servers send it), decoded from `source` without ever yielding more than asked."""

    def __init__(self, source: _Source, *, gzip: bool) -> None:
        self.source = source
        self.gzip = gzip
        self.zlib: zlib._Decompress | None = None
        self.pending = b""  # input not decoded yet
        self.members = 0  # gzip members decoded to their end
        self.ended = False

    def read(self, limit: int) -> bytes:
        while not self.ended:
            if self.pending:
                out = self._step(limit)
                if out:
                    return out
                continue
            data = self.source.read(CHUNK)
            if not data:
                self.ended = True
                break
            self.pending = data
        return b""

    def _step(self, limit: int) -> bytes:
        """Decode from self.pending, at most `limit` bytes; b"" when it needs more input."""
        if self.zlib is None:
            if not self.gzip and len(self.pending) < 2:
                self.pending += self.source.read(CHUNK)  # b"": ended, handled by the caller
                if len(self.pending) < 2:
                    self.ended = True
                    return b""
            self.zlib = zlib.decompressobj(self._wbits())
        try:
            out = self.zlib.decompress(self.pending, limit)
        except zlib.error as exc:
            if self.members:
                self.ended = True  # bytes after the last gzip member: ignored, as browsers do
                return b""
            coding = "gzip" if self.gzip else "deflate"
            raise DecodeError(f"not valid {coding} data: {exc}") from None
        if self.zlib.eof:
            self.pending = self.zlib.unused_data
            self.zlib = None
            self.members += 1
            if not self.gzip:
                self.ended = True  # one deflate stream; anything after it is ignored
        else:
            self.pending = self.zlib.unconsumed_tail
        return out

    def _wbits(self) -> int:
        if self.gzip:
            return 16 + zlib.MAX_WBITS
        # RFC 9110 deflate is zlib-wrapped; some servers send raw deflate. The zlib header
        # says which: compression method 8, and the first two bytes a multiple of 31.
        cmf, flg = self.pending[0], self.pending[1]
        zlib_wrapped = cmf & 0x0F == 8 and (cmf * 256 + flg) % 31 == 0
        return zlib.MAX_WBITS if zlib_wrapped else -zlib.MAX_WBITS
