"""A deterministic generated website to crawl: the demo crawl, the tests and the benchmarks.

Same arguments, same site, byte for byte. URLs (paths; queries are part of a page's canonical URL
but are ignored when serving, as a static file server does):

- ``/`` is page 0, ``/p/<n>`` (1 <= n < pages) page n; every 5th page's canonical URL carries a
  query, e.g. ``/p/7?a=7&b=0``. Pages form a tree (page n links pages k*n+1 .. k*n+k, with
  k = links_per_page // 2), so every page is reachable from ``/``, plus random links.
- ``/missing/<n>`` (linked from some pages) and every unknown path answer 404.
- ``/broken/<n>`` for n % 97 == 11 answer 500.
- ``/moved/<n>`` for n % 37 == 5 answer 301 (n even) or 302 (n odd) to a real page, and the page
  that links a moved path ALWAYS links its target directly too. So a redirect target is in
  ``expected()`` whatever a crawler does with redirects, at the same depth (redirects do not add
  depth), and a correct crawler fetches each target once (by the redirect or by the link).
- ``/robots.txt`` allows everything; it is not a link, so it is not in ``expected()``.

With ``prefix`` (e.g. ``"/sample"``) the site lives under that path: every absolute link and
redirect carries it and ``render`` expects it; ``path_for``, ``links`` and ``expected`` stay
prefix-free. crawlhub serves such a site itself for the demo crawl.

Each link is written in one to three equivalent forms that w3lib's ``canonicalize_url`` maps to
one URL: relative (``5``, ``./5``, ``../p/5``), absolute path, with a fragment, with the query
reordered or percent-escaped (``/p/%35?b=0&a=%37``), absolute with the origin, and with an
upper-case scheme (``HTTP://127.0.0.1:PORT/p/5``). The last two need ``origin``; without it they
fall back to the absolute path. Pages also hold mailto:, tel:, javascript:, data: links and links
to another host: out of scope.
"""

from __future__ import annotations

import random
import re
import sys
import threading
from collections import deque
from dataclasses import dataclass
from html import escape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

HTML = "text/html; charset=utf-8"
OFFSITE = (
    "mailto:webmaster@example.com",
    "tel:+15555550100",
    "javascript:void(0)",
    "data:text/html,<p>inline</p>",
    "https://other.example/p/1",
    "//other.example/about",
)
WORDS = (  # noqa: SIM905
    "crawl frontier redis queue fetch page link depth worker slice lease backup proxy channel "
    "dashboard latency score retry robots sitemap anchor canonical fragment query parameter "
    "harbour lantern meadow orchard pebble quartz river saffron timber velvet willow zephyr"
).split()
_PAGE = re.compile(r"/p/([1-9][0-9]*)")
_SPECIAL = re.compile(r"/(missing|broken|moved)/([0-9]+)")


@dataclass(frozen=True)
class SampleSite:
    pages: int = 2000  # number of real HTML pages
    seed: int = 1  # same arguments -> same site
    links_per_page: int = 8
    prefix: str = ""  # serve under this path ("/sample"), without a trailing slash

    # -- URLs and the link graph ------------------------------------------------------------

    def path_for(self, n: int) -> str:
        """The canonical path (with its sorted query, if any) of page n."""
        if not 0 <= n < self.pages:
            raise ValueError(f"no page {n} in a site of {self.pages} pages")
        if n == 0:
            return "/"
        return f"/p/{n}?a={n % 10}&b={n % 7}" if n % 5 == 2 else f"/p/{n}"

    def is_broken(self, n: int) -> bool:
        return 0 <= n < self.pages and n % 97 == 11

    def is_moved(self, n: int) -> bool:
        return 0 <= n < self.pages and n % 37 == 5

    def moved_target(self, n: int) -> int:
        return (n * 7919 + self.seed) % self.pages

    def _rng(self, n: int, purpose: str) -> random.Random:
        return random.Random(f"{self.seed}:{self.pages}:{self.links_per_page}:{purpose}:{n}")

    def links(self, n: int) -> list[str]:
        """The canonical paths page n links to, in page order (with repeats)."""
        k = max(1, self.links_per_page // 2)
        targets = [c for c in range(n * k + 1, n * k + k + 1) if c < self.pages]
        rng = self._rng(n, "links")
        targets += [rng.randrange(self.pages) for _ in range(self.links_per_page - len(targets))]
        paths = [self.path_for(t) for t in targets]
        if n % 50 == 7:
            paths.append(f"/missing/{n}")
        if self.is_broken(n):
            paths.append(f"/broken/{n}")
        if self.is_moved(n):
            paths += [f"/moved/{n}", self.path_for(self.moved_target(n))]
        return ["/", *paths]

    def _page_of(self, path: str) -> int | None:
        if path == "/":
            return 0
        match = _PAGE.fullmatch(path)
        return int(match[1]) if match and int(match[1]) < self.pages else None

    def expected(self, *, max_depth: int | None = None) -> set[str]:
        """Canonical paths (path + sorted query) a correct crawler from "/" fetches.

        Depth of "/" is 0, a URL's depth is its shortest link distance; with max_depth, URLs
        deeper than it are not fetched. Redirect targets are linked beside their source, so
        following a redirect never reaches a URL sooner than a link does.
        """
        depth = {"/": 0}
        todo = deque(["/"])
        while todo:
            path = todo.popleft()
            page = self._page_of(urlsplit(path).path)
            if page is None or (max_depth is not None and depth[path] >= max_depth):
                continue  # a 404, 500 or redirect source: nothing to follow
            for link in self.links(page):
                if link not in depth:
                    depth[link] = depth[path] + 1
                    todo.append(link)
        return set(depth)

    # -- rendering --------------------------------------------------------------------------

    def _forms(self, target: str, here: str, origin: str, rng: random.Random) -> list[str]:
        """One to three hrefs for `target`, written differently, as seen from path `here`."""
        path, _, query = target.partition("?")
        from_root = here.partition("?")[0] == "/"
        if path == "/":
            top = self.prefix + "/#top"
            relative = ["./", top] if from_root else ["../", "../#top", "../p/../"]
        elif path.startswith("/p/"):
            name = path[3:] + ("?" + query if query else "")
            relative = [f"p/{name}", f"./p/{name}"] if from_root else [name, f"./{name}"]
            relative += [] if from_root else [f"../p/{name}"]
        else:
            relative = [("." if from_root else "..") + target]
        at = self.prefix
        forms = [at + target, f"{at}{target}#section-{rng.randint(1, 9)}", *relative]
        if query:
            a, b = query.split("&")
            digits = path[3:]
            forms += [
                f"{at}{path}?{b}&{a}",
                f"{at}/p/%{ord(digits[0]):X}{digits[1:]}?{b}&{a[:2]}%3{a[2]}",
            ]
        if origin:
            forms += [origin + at + target, "HTTP://" + origin.partition("://")[2] + at + target]
        return rng.sample(forms, rng.randint(1, min(3, len(forms))))

    def _page(self, n: int, origin: str) -> bytes:
        here, rng = self.path_for(n), self._rng(n, "render")
        title = f"Page {n} — {' '.join(rng.sample(WORDS, 3))}"
        items = []
        for target in self.links(n):
            for href in self._forms(target, here, origin, rng):
                items.append(f'<li><a href="{escape(href)}">{escape(target)}</a></li>')
        rng.shuffle(items)
        items.insert(
            rng.randrange(len(items) + 1), f'<li><a href="{escape(OFFSITE[n % 6])}">x</a></li>'
        )
        paragraphs = []
        # Sized as without the prefix, so that a prefixed site is the same site.
        unprefixed = (item.replace(self.prefix, "") if self.prefix else item for item in items)
        size, goal = sum(map(len, unprefixed)), rng.randint(2000, 4500)
        while size < goal:
            text = " ".join(rng.choices(WORDS, k=rng.randint(20, 60))).capitalize() + "."
            paragraphs.append(f"<p>{text}</p>")
            size += len(text) + 7
        html = (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{escape(title)}</title></head>\n<body>\n"
            f'<h1 id="top">{escape(title)}</h1>\n<nav><a href="#top">top</a> '
            f'<a href="mailto:p{n}@example.com">mail</a> <a href="javascript:history.back()">'
            "back</a></nav>\n"
            + "\n".join(paragraphs[: len(paragraphs) // 2])
            + "\n<ul>\n"
            + "\n".join(items)
            + "\n</ul>\n"
            + "\n".join(paragraphs[len(paragraphs) // 2 :])
            + "\n</body></html>\n"
        )
        return html.encode()

    def render(
        self, path_with_query: str, *, origin: str = ""
    ) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body) for any request path; origin is e.g. http://127.0.0.1:8080."""
        path = unquote(urlsplit(path_with_query).path)
        if self.prefix:
            if path != self.prefix and not path.startswith(self.prefix + "/"):
                return 404, {"Content-Type": HTML}, b"<h1>404 Not Found</h1>\n"
            path = path[len(self.prefix) :] or "/"
        if path == "/robots.txt":
            return 200, {"Content-Type": "text/plain"}, b"User-agent: *\nDisallow:\n"
        page = self._page_of(path)
        if page is not None:
            return 200, {"Content-Type": HTML}, self._page(page, origin)
        special = _SPECIAL.fullmatch(path)
        kind, n = (special[1], int(special[2])) if special else ("", -1)
        if kind == "broken" and self.is_broken(n):
            return 500, {"Content-Type": HTML}, b"<h1>500 Internal Server Error</h1>\n"
        if kind == "moved" and self.is_moved(n):
            location = self.prefix + self.path_for(self.moved_target(n))
            return 301 if n % 2 == 0 else 302, {"Location": location, "Content-Type": HTML}, b""
        return 404, {"Content-Type": HTML}, b"<h1>404 Not Found</h1>\n"

    # -- serving ----------------------------------------------------------------------------

    def served_from(self, *, directory: Path, origin: str = "") -> None:
        """Write the site for nginx: `directory`/htdocs (root) and `directory`/locations.conf.

        Pages are files named by path ("/" is index.html, "/p/5" is p/5, no extension: serve with
        default_type text/html); queries are ignored by nginx as by render(). locations.conf
        holds the location blocks (500s and redirects included) to put in a server block.
        """
        root = Path(directory) / "htdocs"
        (root / "p").mkdir(parents=True, exist_ok=True)
        (root / "robots.txt").write_bytes(self.render("/robots.txt")[2])
        for n in range(self.pages):
            name = "index.html" if n == 0 else f"p/{n}"
            (root / name).write_bytes(self._page(n, origin))
        lines = [
            "location = / { try_files /index.html =404; }",
            "location / { try_files $uri =404; }",
            "location = /robots.txt { default_type text/plain; }",
        ]
        for n in range(self.pages):
            if self.is_broken(n):
                lines.append(f"location = /broken/{n} {{ return 500; }}")
            if self.is_moved(n):
                status = 301 if n % 2 == 0 else 302
                target = self.path_for(self.moved_target(n))
                lines.append(f'location = /moved/{n} {{ return {status} "{target}"; }}')
        (Path(directory) / "locations.conf").write_text("\n".join(lines) + "\n")


# A client that hangs up before its answer is read (a crawler cancelled, a timeout) is no
# error of the server's: socketserver would print a traceback for each.
GONE_CLIENT = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)


class QuietHTTPServer(ThreadingHTTPServer):
    """A threaded HTTP server that says nothing when a client hangs up; other errors are
    reported as socketserver reports them."""

    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], GONE_CLIENT):
            return
        super().handle_error(request, client_address)


def serve(
    site: SampleSite, host: str = "127.0.0.1", port: int = 0
) -> tuple[ThreadingHTTPServer, str]:
    """Serve `site` from a thread (HTTP/1.1, keep-alive); stop with shutdown(), server_close()."""
    origin = ""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # no 40 ms delayed-ACK stall per keep-alive response
        wbufsize = 64 * 1024  # headers and body in one write; flushed after each request

        def do_GET(self) -> None:
            status, headers, body = site.render(self.path, origin=origin)
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_HEAD = do_GET

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = QuietHTTPServer((host, port), Handler)
    server.daemon_threads = True
    origin = f"http://{host}:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, name="sample-site", daemon=True).start()
    return server, origin
