"""The structured data a page declares about itself: JSON-LD, microdata and OpenGraph (extruct).

Its own module, away from extraction rules: extruct (and the parsers it brings) takes most of
a second to import, and the process that runs rules (evaluator.py) has no use for it. It is
imported on first use, not with the module: the web server, cron and every management command
import the engine and never read a page's structured data. A worker imports it before it
forks its work horses (settings.WORKER_PRELOAD), so a slice does not import it again.
"""

from __future__ import annotations

import json

from crawls.engine.extraction import Page, TooLarge, json_safe

SYNTAXES = ["json-ld", "microdata", "opengraph"]
MAX_STRUCTURED_BODY = 5 * 1024 * 1024
MAX_STRUCTURED_BYTES = 256 * 1024


def structured_data(*, url: str, body: bytes, content_type: str) -> dict | None:
    """What an HTML page declares about itself (JSON-LD, microdata, OpenGraph), by syntax, in
    extruct's uniform shape; None for anything else, for a page that declares nothing or
    cannot be read, or one over MAX_STRUCTURED_BODY. Never raises.

    The result holds at most MAX_STRUCTURED_BYTES of JSON: items past that are left out, and
    "dropped" says how many.
    """
    if not body or len(body) > MAX_STRUCTURED_BODY:
        return None
    page = Page(url=url, body=body, content_type=content_type)
    try:
        if page.markup() != "html":
            return None
        import extruct  # see the module docstring

        found = extruct.extract(
            page.utf8(),
            base_url=url,
            encoding="UTF-8",
            syntaxes=SYNTAXES,
            uniform=True,
            errors="ignore",
        )
        return _bounded(found)
    except Exception:  # extruct and lxml on whatever a site sends
        return None


def _bounded(found: dict) -> dict | None:
    """Syntax -> items, in page order, as many as fit in MAX_STRUCTURED_BYTES of JSON (an item
    nested too deep to store is left out too)."""
    kept: dict[str, object] = {}
    size = dropped = 0
    for syntax in SYNTAXES:
        items = []
        for item in found.get(syntax) or []:
            try:
                item = json_safe(item)
            except TooLarge:
                dropped += 1
                continue
            item_size = len(json.dumps(item, ensure_ascii=False).encode())
            if size + item_size > MAX_STRUCTURED_BYTES:
                dropped += 1
                continue
            size += item_size
            items.append(item)
        if items:
            kept[syntax] = items
    if dropped:
        kept["dropped"] = dropped
    return kept or None
