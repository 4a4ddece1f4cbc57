"""A crawl's credentials as people give them (crawls/engine/credentials.py takes them from
here): extra headers as 'Name: value' lines, a Cookie header, a cookies.txt file, login form
fields as 'name=value' lines, each read into values or refused with a CredentialsError that
names the input and the line, never quoting it (a line that did not parse may hold a secret)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from crawlhub.http.urls import ascii_host

MAX_LINES = 200
# Headers the client decides (framing, the host), or that another field gives.
FORBIDDEN_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "cookie",
        "proxy-authorization",
    }
)
_TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_UNIX_TIME = re.compile(r"-?[0-9]{1,20}")  # ASCII digits: str.isdigit() takes '²'


class CredentialsError(ValueError):
    """Input that cannot be used: `field` names the input, the message what and where (the line)
    without quoting any of it: a line that did not parse says nothing reliable about which
    part of it is a secret."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Cookie:
    name: str
    value: str
    domain: str = ""  # "" : every origin of the crawl
    subdomains: bool = False
    path: str = "/"
    secure: bool = False

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "value": self.value,
            "domain": self.domain,
            "subdomains": self.subdomains,
            "path": self.path,
            "secure": self.secure,
        }

    @classmethod
    def from_json(cls, data: dict) -> Cookie:
        return cls(
            **{
                k: data[k]
                for k in ("name", "value", "domain", "subdomains", "path", "secure")
                if k in data
            }
        )

    def matches(self, scheme: str, host: str, path: str) -> bool:
        if self.secure and scheme != "https":
            return False
        on_subdomain = self.subdomains and host.endswith("." + self.domain)
        if self.domain and host != self.domain and not on_subdomain:
            return False
        return path.startswith(self.path) or self.path in ("", "/")


def check_header_text(text: str, what: str) -> str:
    """What is wrong with a value sent in a header (a line break, a non-Latin-1 character)."""
    if "\r" in text or "\n" in text or "\x00" in text:
        return f"{what} must be a single line"
    if any(ord(char) > 255 for char in text):
        return f"{what} cannot be sent in an HTTP header (Latin-1 only)"
    return ""


def parse_headers(text: str) -> list[tuple[str, str]]:
    """'Name: value' lines (blank lines skipped) as (name, value) pairs; CredentialsError naming
    the line. A header the client decides, or that another field gives, is refused."""
    pairs = []
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        raise CredentialsError("headers", f"{len(lines)} lines; at most {MAX_LINES}")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        name, colon, value = line.partition(":")
        name, value = name.strip(), value.strip()
        if not colon or not name:
            raise CredentialsError(
                "headers",
                f"line {number}: not a header; write 'Name: value' (found no name before a colon)"
                if colon
                else f"line {number}: not a header; write 'Name: value' (found no colon)",
            )
        if not set(name) <= _TOKEN:
            raise CredentialsError(
                # Not quoted: "Authorization Bearer abc: x" has the secret before its colon.
                "headers",
                f"line {number}: the text before the first colon is not a header "
                "name (letters, digits and -_.!#$%&'*+^`|~ only); write 'Name: value'",
            )
        if name.lower() in FORBIDDEN_HEADERS:
            other = " (give cookies in the Cookie field)" if name.lower() == "cookie" else ""
            raise CredentialsError(
                "headers", f"line {number}: {name} is set by crawlhub, not here{other}"
            )
        if problem := check_header_text(value, f"line {number}: the value of {name}"):
            raise CredentialsError("headers", problem)
        pairs.append((name, value))
    return pairs


def parse_cookie_header(text: str) -> list[Cookie]:
    """A Cookie header's value, 'name=value; other=value', as cookies for every crawl origin."""
    text = text.strip()
    if not text:
        return []
    if problem := check_header_text(text, "the cookie"):
        raise CredentialsError("cookie", problem)
    cookies = []
    for number, part in enumerate(text.split(";"), start=1):
        if not part.strip():
            continue
        name, equals, value = part.strip().partition("=")
        if not equals or not name.strip() or not set(name.strip()) <= _TOKEN:
            raise CredentialsError(
                # Not quoted: a part without "=" is most likely a cookie's value, a secret.
                "cookie",
                f"part {number} (counting from 1, parts separated by ';') is not "
                "name=value; write 'name=value; other=value', as a Cookie header",
            )
        cookies.append(Cookie(name=name.strip(), value=value.strip()))
    return cookies


def parse_cookies_txt(text: str) -> list[Cookie]:
    """A Netscape cookies.txt (what browser extensions and curl -c write): one cookie a line,
    seven fields separated by tabs: domain, include subdomains (TRUE/FALSE), path, secure
    (TRUE/FALSE), expiry (Unix time, 0 for a session cookie), name, value. Lines starting with
    '#' are comments, except '#HttpOnly_' before a domain. CredentialsError names the line."""
    cookies = []
    lines = text.splitlines()
    if len(lines) > 10 * MAX_LINES:
        raise CredentialsError("cookies_txt", f"{len(lines)} lines; at most {10 * MAX_LINES}")
    for number, raw in enumerate(lines, start=1):
        line = raw.strip("\r\n")
        if line.startswith("#HttpOnly_"):
            line = line.removeprefix("#HttpOnly_")
        elif not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"cookies.txt line {number}"
        fields = line.split("\t")
        if len(fields) != 7:
            raise CredentialsError(
                "cookies_txt",
                f"{where}: 7 fields separated by tabs expected (domain, "
                f"subdomains, path, secure, expiry, name, value), found {len(fields)}",
            )
        # No field is quoted: a line whose fields are out of place may hold the value anywhere.
        domain, subdomains, path, secure, expiry, name, value = fields
        if subdomains.upper() not in ("TRUE", "FALSE"):
            problem = "the subdomains field (the second) is not TRUE or FALSE"
        elif secure.upper() not in ("TRUE", "FALSE"):
            problem = "the secure field (the fourth) is not TRUE or FALSE"
        elif not _UNIX_TIME.fullmatch(expiry.strip()):
            problem = "the expiry field (the fifth) is not a Unix time (0: a session cookie)"
        elif not (host := ascii_host(domain.strip().lstrip("."))):
            problem = "the domain field (the first) is not a host name"
        elif not name or not set(name) <= _TOKEN:
            problem = "the name field (the sixth) is not a cookie name (no space, ;, = or quote)"
        else:
            problem = check_header_text(value, "the value")
        if problem:
            raise CredentialsError("cookies_txt", f"{where}: {problem}")
        cookies.append(
            Cookie(
                name=name,
                value=value,
                domain=host,
                subdomains=subdomains.upper() == "TRUE",
                path=path or "/",
                secure=secure.upper() == "TRUE",
            )
        )
    return cookies


def parse_fields(text: str) -> list[tuple[str, str]]:
    """Login form fields, 'name=value' a line; the value is everything after the first '='."""
    pairs = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        name, equals, value = line.partition("=")
        if not equals or not name.strip():
            raise CredentialsError(
                "login_fields",
                f"line {number}: not a field; write 'name=value' (the form "
                "field's name, as in its HTML)",
            )
        pairs.append((name.strip(), value))
    return pairs
