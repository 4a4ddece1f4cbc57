"""Reading a response's headers without the email package, for the connections of session.py.

http.client reads a response's header lines and then hands them to the email package, whose
feed parser, policy and content-type reading are about a tenth of a plain fetch's Python work.
An ordinary head needs none of that: every line is `Name: value` and CRLF. parse_headers below
reads the lines as http.client does (its own _read_headers: the same line-length and
header-count limits, the same exceptions), and when the whole block is of that common form it
builds the HTTPMessage the email package would have built from it: the same (name, value)
pairs (the value with its leading spaces and tabs dropped, as compat32 does), no defects, an
empty payload. Anything else goes to http.client's own parse_headers, on the same bytes:
- a line that is not a field name (printable ASCII but the colon) and a colon: an obsolete
  folded line, one with no colon, leading whitespace, a space before the colon, "From ";
- a line ending in a bare LF, a CR inside a line, a head cut short by the end of the stream;
- a Content-Type naming multipart/ or message/ anywhere in its value (the email package would
  go on to parse a body it was not given, noting defects that urllib3 reads).

The message is http.client's HTTPMessage as ever: begin(), urllib3 (its items, payload and
defects), requests' cookie jar and wire.py read it as they did.

Its reach is Response only: the response class of crawlhub's own connections (session.py).
http.client's module, and every other user of it in the process, are left alone.
"""

from __future__ import annotations

import http.client
import io
import re
import types

# A field name as the email package accepts one (its headerRE, less the empty name), a colon,
# and a value with neither CR nor LF; the block ends with the empty line.
_FIELD = r"[\x21-\x39\x3b-\x7e]+:[^\r\n]*\r\n"
_PLAIN_HEAD = re.compile(rf"(?:{_FIELD})*\r\n")
# (name, value) as compat32's header_source_parse makes them: the value's leading spaces and
# tabs dropped, the rest kept (the line end aside).
_NAME_AND_VALUE = re.compile(r"([\x21-\x39\x3b-\x7e]+):[ \t]*([^\r\n]*)\r\n")
# A body type the email package parses further: left to it, however unlikely on a web page.
_PARSED_BODY_TYPE = re.compile(r"^content-type:[^\r\n]*(?:multipart|message)/", re.I | re.M)


def parse_headers(fp: io.BufferedIOBase) -> http.client.HTTPMessage:
    """http.client.parse_headers(fp), the same message from the same bytes read."""
    lines = http.client._read_headers(fp)  # http.client's limits, exactly
    head = b"".join(lines).decode("iso-8859-1")
    if _PLAIN_HEAD.fullmatch(head) is None or _PARSED_BODY_TYPE.search(head) is not None:
        return http.client.parse_headers(io.BytesIO(b"".join(lines)))
    message = http.client.HTTPMessage()
    # What the email package's parser sets on the message it makes (the rest is __init__'s).
    message._headers = _NAME_AND_VALUE.findall(head)
    message._payload = ""
    return message


class Response(http.client.HTTPResponse):
    """http.client's response, its headers read by parse_headers above.

    begin() is http.client's own code (the same code object), run with the module-level name
    parse_headers, the only one it looks up for the headers, bound to ours: a subclass has no
    other way in, and a copy of begin()'s text would keep one Python version's. The other names
    begin() looks up (_read_headers, CONTINUE, ...) are http.client's, as they were at import.
    If a Python release stops calling parse_headers from begin(), responses are read by
    http.client as before and tests/engine/test_page_budgets.py says so.
    """

    begin = types.FunctionType(
        http.client.HTTPResponse.begin.__code__,
        {**vars(http.client), "parse_headers": parse_headers},
        "begin",
    )
