"""A page as rendering (crawlhub/http/rendering.py) takes and gives it: whether a fetched page
is worth rendering, the selector it may wait for, and the FetchResult it becomes (the browser's
DOM as its body, its links found again) or the failure it ends in."""

from __future__ import annotations

import dataclasses
import time

from crawlhub.http import links
from crawlhub.http.fetch_result import FetchResult
from crawlhub.http.render_routing import RenderOptions

RENDERED_TYPE = "text/html; charset=utf-8"


def selector_problem(selector: str) -> str:
    """Why `selector` cannot be waited for (not CSS, as a browser reads it), or ""."""
    if not selector.strip():
        return ""
    import soupsieve  # here: ~0.3 s of CPU at import, which every worker and command paid

    try:
        soupsieve.compile(selector)
    except soupsieve.SelectorSyntaxError as exc:
        reason = str(exc).splitlines()[0].rstrip(".")
        return f"{selector!r} is not a CSS selector: {reason}."
    return ""


def renders(document: FetchResult) -> bool:
    """Worth rendering: a complete 2xx HTML answer (anything else is kept as fetched)."""
    return (
        document.status is not None
        and 200 <= document.status < 300
        and not document.error
        and not document.truncated
        and links.is_html(document.content_type)
    )


def failed(document: FetchResult, message: str, kind: str, started: float) -> FetchResult:
    return dataclasses.replace(
        document,
        error=message,
        error_kind=kind,
        title="",
        links=[],
        link_texts=[],
        elapsed_ms=document.elapsed_ms + int((time.monotonic() - started) * 1000),
    )


def rendered_result(
    document: FetchResult,
    html: str,
    navigations: list[str],
    options: RenderOptions,
    started: float,
) -> FetchResult:
    body = html.encode("utf-8")
    result = dataclasses.replace(
        document,
        body=body[: options.max_bytes],
        content_type=RENDERED_TYPE,
        truncated=len(body) > options.max_bytes,
        title="",
        links=[],
        link_texts=[],
        elapsed_ms=document.elapsed_ms + int((time.monotonic() - started) * 1000),
        headers={**document.headers, "content-type": RENDERED_TYPE},
        exchange=None,  # the body is the browser's DOM, not the one that came with those heads
    )
    result.headers.pop("content-encoding", None)
    result.headers.pop("content-length", None)
    if not result.truncated:
        result.title, result.links, result.link_texts = links.extract_with_texts(
            body, document.final_url, RENDERED_TYPE
        )
        for target in navigations:
            if (absolute := links.absolute_url(target, document.final_url)) and (
                absolute not in result.links
            ):
                result.links.append(absolute)
                result.link_texts.append("")
    return result
