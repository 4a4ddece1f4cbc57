"""The charset a site names, as Python reads it: one door for every decoding of a fetched body.

A site names its charset in Content-Type or in <meta>, and that name is looked up in Python's
codec registry, which holds far more than charsets: codecs from bytes to bytes (base64, zlib,
hex, uu, bz2, quopri, rot13) that give bytes back or refuse bytes, and text codecs that are no
page's charset and fail whatever the error handler (idna, punycode, undefined) or read
backslashes as escapes (unicode_escape). Browsers do not read UTF-7 either (WHATWG's Encoding
Standard has no such label). A page naming one of those, or a name Python does not know
(x-user-defined, uft-8), is read as if it named none: the caller's default. Each used to end a
crawl's page as an internal error, or a page of the dashboard as a 500.
"""

from __future__ import annotations

import codecs

# Text codecs of Python's that are no charset a page may name.
NOT_CHARSETS = frozenset(
    {
        "idna",
        "punycode",
        "undefined",
        "unicode-escape",
        "raw-unicode-escape",
        "utf-7",
    }
)
MAX_LABEL = 64


def text_codec(label: str | None) -> str | None:
    """Python's name for the text encoding a site's charset label names (quotes and spaces
    around it aside), or None when it names none that can read a page."""
    if not label:
        return None
    label = label.strip().strip("\"'").strip()
    if not label or len(label) > MAX_LABEL or not label.isascii():
        return None
    try:
        info = codecs.lookup(label)
    except (LookupError, ValueError):  # unknown; ValueError for a NUL in the name
        return None
    if not getattr(info, "_is_text_encoding", True) or info.name in NOT_CHARSETS:
        return None
    return info.name


def decode(data: bytes, label: str | None, *, default: str = "utf-8") -> str:
    """`data` as text in the charset `label` names, else in `default`; undecodable bytes
    replaced. Never raises."""
    name = text_codec(label) or default
    try:
        return data.decode(name, "replace")
    except UnicodeError:  # no charset's decoder does this; one more safety
        return data.decode("utf-8", "replace")


def incremental_decoder(name: str, errors: str = "replace") -> Decoder:
    """A decoder of text_codec's `name` fed a slice at a time, that never raises."""
    return Decoder(name, errors)


class Decoder:
    """An incremental decoder that never raises. Stateful decoders can still fail with
    "replace": ISO-2022's refuse an escape sequence cut by a slice's end ("pending buffer
    overflow"); then that slice is decoded on its own, from a fresh state."""

    def __init__(self, name: str, errors: str) -> None:
        self.name, self.errors = name, errors
        self._decoder = codecs.getincrementaldecoder(name)(errors)

    def decode(self, data: bytes | memoryview, final: bool = False) -> str:
        try:
            return self._decoder.decode(data, final)
        except UnicodeError:
            self._decoder = codecs.getincrementaldecoder(self.name)(self.errors)
            try:
                return "\ufffd" + bytes(data).decode(self.name, self.errors)
            except UnicodeError:
                return "\ufffd"
