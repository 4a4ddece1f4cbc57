"""A crawl's responses as a web archive: a WARC file (WARC/1.1, ISO 28500:2017), written record
by record while it streams, and a WACZ package of it (made by the `wacz` package, below).

Each page that got an answer and kept its body (a crawl with "keep bodies") is a pair of
records, each naming the other: its request, as it was sent (secrets masked), and
- a `response`: the status line and every header as they came, then the body;
- or a `revisit` with the server-not-modified profile, for a 304 that answered a conditional
  request: it refers to the capture of the run before (the crawl's baseline) that it stands for;
- or a `revisit` with the identical-payload-digest profile, for a body the export already holds
  under another URL: it refers to that response record.
A page that got no answer (a refused connection, robots.txt) has no record, nor has a request in
the failure queue: neither kept anything.

The body a page keeps is the one the client decoded (gzip, deflate, chunks undone) and cut at
max_bytes, so the headers that describe the bytes on the wire rather than that payload are
kept under another name, X-Orig-<name>: Content-Encoding, Transfer-Encoding, and a
Content-Length that the payload does not have (a Content-Length of the payload is written in
its place). A cut body says so (WARC-Truncated: length). Pages from before crawlhub kept the
heads (Page.heads), and pages rendered in a browser (whose body is the DOM), have their heads
rebuilt from the headers the page row keeps.

Digests are SHA-256 (base32, as warcio writes them): Page.digest is the body's SHA-256, so a
304's revisit names the payload of its earlier capture without reading it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from http import HTTPStatus
from io import BytesIO
from pathlib import Path
from typing import BinaryIO

from django.db.models import Count, Q, QuerySet
from django.utils import timezone
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from crawlhub.http import wire
from crawls.models import Crawl, Page

log = logging.getLogger(__name__)

WARC_VERSION = "1.1"
SPEC = "http://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/"
IDENTICAL_PAYLOAD = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
NOT_MODIFIED = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
# Bodies can be megabytes each: few rows per database round trip.
CHUNK_ROWS = 20
# The framing headers renamed when the payload is not what they describe (see above).
ORIGINAL = "X-Orig-"
CODINGS = frozenset({"content-encoding", "transfer-encoding"})
EMPTY_DIGEST = hashlib.sha256(b"").hexdigest()
COLUMNS = (
    "id",
    "url",
    "final_url",
    "status",
    "fetched_at",
    "truncated",
    "body",
    "digest",
    "fp",
    "heads",
    "headers",
    "request_headers",
)


def warc_date(moment: datetime) -> str:
    """A WARC/1.1 date: UTC, to the microsecond."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def sha256_label(hex_digest: str) -> str:
    """A SHA-256 in hex (Page.digest) as a WARC digest: the algorithm, then base32."""
    return "sha256:" + base64.b32encode(bytes.fromhex(hex_digest)).decode()


class _Head(StatusAndHeaders):
    """An HTTP head that warcio writes byte for byte: warcio would rebuild it from its parts,
    percent-encoding what is not ASCII."""

    def __init__(self, raw: bytes) -> None:
        first, *lines = raw.decode("latin-1").split("\r\n")
        protocol, _, statusline = first.partition(" ")
        headers = [tuple(line.split(":", 1)) for line in lines if ":" in line]
        super().__init__(statusline, [(n, v.strip()) for n, v in headers], protocol=protocol)
        self.raw = raw

    def compute_headers_buffer(self, header_filter=None) -> None:
        self.headers_buff = self.raw


@dataclass(frozen=True)
class _Capture:
    """A response record that later records refer to."""

    record_id: str
    uri: str
    date: str
    digest: str  # its payload's, as WARC writes it


def _wire_bytes(head: str) -> bytes:
    """A head as bytes: Latin-1, as http.client read it; the mask of a secret in UTF-8."""
    return wire.MASK.encode().join(
        part.encode("latin-1", "replace") for part in head.split(wire.MASK)
    )


def _payload_head(response_head: str, length: int) -> str:
    """The response head with its framing headers renamed where the payload (decoded, maybe
    cut) is not what they describe."""
    lines = response_head.split("\r\n")
    out = [lines[0]]
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        lower = name.strip().lower()
        if colon and lower in CODINGS and value.strip().lower() not in ("", "identity"):
            out.append(ORIGINAL + line)
        elif colon and lower == "content-length" and value.strip() != str(length):
            out.extend([f"{name}: {length}", ORIGINAL + line])
        else:
            out.append(line)
    return "\r\n".join(out)


def _heads(row: dict) -> tuple[str, str]:
    """The page's request and response heads: as kept, or rebuilt from its row."""
    request, response = wire.split(row["heads"] or "")
    if request:
        return request, response
    status = row["status"]
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = ""
    headers = row["headers"] if isinstance(row["headers"], dict) else {}
    sent = row["request_headers"] if isinstance(row["request_headers"], dict) else {}
    rebuilt = wire.Exchange(
        method="GET",
        url=row["final_url"] or row["url"],
        sent=sent,
        version="HTTP/1.1",
        status=status,
        reason=reason,
        received=tuple(headers.items()),
    )
    return rebuilt.request_head(), rebuilt.response_head()


class WarcWriter:
    """Writes a crawl's WARC to a file object; `steps()` writes it a page at a time."""

    def __init__(self, crawl: Crawl, fileobj: BinaryIO, *, filename: str) -> None:
        self.crawl = crawl
        self.filename = filename
        self.writer = WARCWriter(fileobj, gzip=True, warc_version=WARC_VERSION)
        self.warcinfo_id = ""
        self.originals: dict[str, _Capture] = {}  # by payload digest, for duplicates
        self.candidates: set[str] = set()  # Page.digest values that more than one page has
        self.earlier: dict[int, dict] = {}  # the baseline's pages of this chunk's 304s, by fp
        self.count = 0  # pages written

    def pages(self) -> QuerySet[Page]:
        return self.crawl.pages.filter(body__isnull=False, status__isnull=False).order_by("id")

    def steps(self) -> Iterator[int]:
        """Write the warcinfo record, then each page's records; yield the pages written so far
        after each step."""
        self._write_warcinfo()
        yield self.count
        self.candidates = self._duplicated_digests()
        chunk: list[dict] = []
        for values in self.pages().values_list(*COLUMNS).iterator(chunk_size=CHUNK_ROWS):
            chunk.append(dict(zip(COLUMNS, values, strict=True)))
            if len(chunk) == CHUNK_ROWS:
                yield from self._write_chunk(chunk)
                chunk = []
        yield from self._write_chunk(chunk)

    def _write_warcinfo(self) -> None:
        crawl = self.crawl
        fields = {
            "software": "crawlhub",
            "format": f"WARC File Format {WARC_VERSION}",
            "conformsTo": SPEC,
            "isPartOf": f"crawl {crawl.pk} {crawl.name}",
            "description": "seeds: " + " ".join(crawl.seeds),
            "robots": "obey" if crawl.obey_robots else "ignore",
        }
        # One line per field, as warcio's create_warcinfo_record writes them, with a SHA-256.
        text = "".join(f"{name}: {' '.join(value.split())}\r\n" for name, value in fields.items())
        block = text.encode()
        record = self.writer.create_warc_record(
            "",
            "warcinfo",
            payload=BytesIO(block),
            length=len(block),
            warc_headers_dict={
                "WARC-Filename": self.filename,
                "WARC-Date": warc_date(timezone.now()),
                "WARC-Block-Digest": sha256_label(hashlib.sha256(block).hexdigest()),
            },
        )
        self.warcinfo_id = record.rec_headers.get_header("WARC-Record-ID")
        self.writer.write_record(record)

    def _duplicated_digests(self) -> set[str]:
        """Page.digest values of more than one full body: the only ones whose first capture
        is remembered, so that memory grows with duplicated payloads, not with pages."""
        shared = (
            self.pages()
            .exclude(status=304)
            .exclude(truncated=True)
            .exclude(digest__in=("", EMPTY_DIGEST))
            .order_by()
            .values("digest")
            .annotate(n=Count("id"))
            .filter(n__gt=1)
            .values_list("digest", flat=True)
        )
        return set(shared.iterator())

    def _write_chunk(self, rows: list[dict]) -> Iterator[int]:
        not_modified = [r["fp"] for r in rows if r["status"] == 304 and r["fp"] is not None]
        self.earlier = self._earlier_captures(not_modified)
        for row in rows:
            self._write_page(row)
            self.count += 1
            yield self.count

    def _earlier_captures(self, fps: list[int]) -> dict[int, dict]:
        """The baseline's full captures of these URLs: what their 304s stand for."""
        if not fps or self.crawl.baseline_id is None:
            return {}
        rows = Page.objects.filter(crawl_id=self.crawl.baseline_id, fp__in=fps, status=200).values(
            "fp", "url", "final_url", "fetched_at", "digest"
        )
        return {row["fp"]: row for row in rows}

    def _write_page(self, row: dict) -> None:
        body = bytes(row["body"])
        uri = row["final_url"] or row["url"]
        date = warc_date(row["fetched_at"])
        request_head, response_head = _heads(row)
        common = {"WARC-Date": date, "WARC-Warcinfo-ID": self.warcinfo_id}
        earlier = self.earlier.get(row["fp"]) if row["status"] == 304 else None
        digest = sha256_label(hashlib.sha256(body).hexdigest())
        if earlier is not None:
            head = _wire_bytes(response_head)
            response = self._revisit(
                uri,
                head,
                common,
                profile=NOT_MODIFIED,
                original=_Capture(
                    record_id="",
                    uri=earlier["final_url"] or earlier["url"],
                    date=warc_date(earlier["fetched_at"]),
                    digest=sha256_label(earlier["digest"]) if earlier["digest"] else "",
                ),
            )
        elif (original := self._original(row, digest)) is not None:
            # Its headers go with the original's payload, decoded as this page's was.
            head = _wire_bytes(_payload_head(response_head, len(body)))
            response = self._revisit(
                uri, head, common, profile=IDENTICAL_PAYLOAD, original=original
            )
        else:
            head = _wire_bytes(_payload_head(response_head, len(body)))
            headers = {
                **common,
                "WARC-Payload-Digest": digest,
                "WARC-Block-Digest": sha256_label(hashlib.sha256(head + body).hexdigest()),
            }
            if row["truncated"]:
                headers["WARC-Truncated"] = "length"  # WARC 1.1, 5.13: cut at a length limit
            response = self.writer.create_warc_record(
                uri,
                "response",
                payload=BytesIO(body),
                length=len(body),
                http_headers=_Head(head),
                warc_headers_dict=headers,
            )
            if row["digest"] in self.candidates and not row["truncated"] and body:
                record_id = response.rec_headers.get_header("WARC-Record-ID")
                self.originals.setdefault(digest, _Capture(record_id, uri, date, digest))
        self.writer.write_request_response_pair(self._request(uri, request_head, common), response)

    def _original(self, row: dict, digest: str) -> _Capture | None:
        """The response record already written with this payload, if the page's body is one
        that more than one page has."""
        if row["status"] == 304 or row["truncated"] or row["digest"] not in self.candidates:
            return None
        return self.originals.get(digest)

    def _revisit(self, uri: str, head: bytes, common: dict, *, profile: str, original: _Capture):
        headers = {
            **common,
            "WARC-Profile": profile,
            "WARC-Refers-To-Target-URI": original.uri,
            "WARC-Refers-To-Date": original.date,
            "WARC-Block-Digest": sha256_label(hashlib.sha256(head).hexdigest()),
        }
        if original.record_id:
            headers["WARC-Refers-To"] = original.record_id
        if original.digest:
            headers["WARC-Payload-Digest"] = original.digest
        return self.writer.create_warc_record(
            uri, "revisit", http_headers=_Head(head), warc_headers_dict=headers
        )

    def _request(self, uri: str, request_head: str, common: dict):
        head = _wire_bytes(request_head)
        headers = {
            **common,
            "WARC-Block-Digest": sha256_label(hashlib.sha256(head).hexdigest()),
            "WARC-Payload-Digest": sha256_label(EMPTY_DIGEST),
        }
        return self.writer.create_warc_record(
            uri,
            "request",
            payload=BytesIO(b""),
            length=0,
            http_headers=_Head(head),
            warc_headers_dict=headers,
        )


# --- WACZ ---------------------------------------------------------------------------------------

# The pages a replay tool lists first: complete HTML answers (a 304 stands for a capture in the
# run before, which the package does not hold).
PAGE_TYPES = ("text/html", "application/xhtml+xml")
FILE_CHUNK = 256 * 1024


class PackageError(RuntimeError):
    """The `wacz` tool could not make the package; the message has what it said."""


def write_wacz(crawl: Crawl, target: Path, *, warc_name: str) -> int:
    """A WACZ package of the crawl's WARC at `target`, made by the `wacz` package's own tool
    (`wacz create`, in a process of its own: it prints as it goes and imports a lot), with a
    page list of the crawl's HTML pages, seeds first. Returns the number of pages archived.

    Everything is written to a temporary folder first (the WARC, then the package, which holds
    it again): about twice the WARC's size on disk, for a while."""
    with tempfile.TemporaryDirectory(prefix="crawlhub-wacz-") as folder:
        warc = Path(folder) / warc_name
        with warc.open("wb") as out:
            count = 0
            for count in WarcWriter(crawl, out, filename=warc_name).steps():  # noqa: B007
                pass
        pages = Path(folder) / "pages.jsonl"
        _write_page_list(crawl, pages)
        command = [
            sys.executable,
            "-m",
            "wacz",
            "create",
            str(warc),
            "--output",
            str(target),
            "--pages",
            str(pages),
            "--title",
            f"crawl {crawl.pk}: {crawl.name}",
            "--desc",
            "crawlhub crawl of " + " ".join(crawl.seeds),
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            said = " ".join((done.stdout + done.stderr).split())[-500:]
            raise PackageError(f"wacz create exited with {done.returncode}: {said}")
    return count


def _write_page_list(crawl: Crawl, path: Path) -> None:
    """pages.jsonl as the WACZ spec has it: a header line, then a page per line, its `ts` the
    WARC-Date of its record (which is how `wacz` finds the record)."""
    seeds = set(crawl.seeds)
    pages = (
        crawl.pages.filter(body__isnull=False, status=200, truncated=False)
        .filter(
            Q(content_type__startswith=PAGE_TYPES[0]) | Q(content_type__startswith=PAGE_TYPES[1])
        )
        .order_by("depth", "id")
        .values_list("url", "final_url", "fetched_at", "title")
    )
    with path.open("w", encoding="utf-8") as out:
        out.write(json.dumps({"format": "json-pages-1.0", "id": "pages", "title": "Pages"}) + "\n")
        for url, final_url, fetched_at, title in pages.iterator(chunk_size=2000):
            page = {"url": final_url or url, "ts": warc_date(fetched_at), "title": title or url}
            if url in seeds:
                page["seed"] = True
            out.write(json.dumps(page, ensure_ascii=False) + "\n")


def iter_wacz(crawl: Crawl, *, warc_name: str) -> Iterator[bytes]:
    """write_wacz as a stream: the package is made whole first (a zip is written with its
    index at the end), then read out; its folder goes once the stream ends or is dropped."""
    with tempfile.TemporaryDirectory(prefix="crawlhub-wacz-out-") as folder:
        target = Path(folder) / "crawl.wacz"
        try:
            write_wacz(crawl, target, warc_name=warc_name)
        except PackageError:
            log.exception("the WACZ of crawl %s could not be made", crawl.pk)
            raise
        with target.open("rb") as package:
            while chunk := package.read(FILE_CHUNK):
                yield chunk
