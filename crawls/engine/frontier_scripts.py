"""The frontier's Lua scripts and what goes in and out of them: the scripts loaded once per
client, a request's outcome and its links packed as complete.lua reads them, the host events
the scripts return, the seen-set bucket of a fingerprint. Used by crawls/engine/frontier.py.
"""

from __future__ import annotations

import weakref
from dataclasses import replace
from itertools import repeat
from operator import and_, contains, rshift
from pathlib import Path
from typing import NamedTuple

import redis
from redis.commands.core import Script

from crawlhub.http.urls import url_origin
from crawls.engine.keys import lua_header
from crawls.engine.request import (
    OUTCOME_KINDS,
    VIA_LISTED,
    VIA_REDIRECT,
    VIA_SITEMAP,
    Outcome,
    Request,
    fingerprint,
    link_tail,
    prefix_host,
    request_host,
    with_history,
)

# 2^12 buckets: at 1,000,000 URLs a bucket holds ~244 fingerprints (the fullest ~310), well
# under Redis' set-max-intset-entries=512, so every bucket stays an intset at ~8 bytes per
# fingerprint. Past ~1.7M URLs the fullest buckets start to convert to hash tables (~5x the memory).
SEEN_BUCKET_BITS = 12

_LUA_DIR = Path(__file__).resolve().parent / "lua"
_SCRIPTS = (
    "add",
    "claim",
    "complete",
    "release",
    "requeue_expired",
    "retry_failed",
    "pending",
    "cancel",
    "slice_beat",
    "live_slices",
    "series",
    "renew",
    "release_claimed",
    "send",
    "answered",
    "push_back",
    "host_hold",
    "host_drop",
    "pace",
    "drop_claimed",
    "drop_queued",
    "queue_depths",
    "queue_page",
    "spill",
    "spilled",
    "unspill",
    "unspilled",
)


def _lua_sources() -> dict[str, str]:
    # Each script: the names of its KEYS (from crawls/engine/keys.py), the shared library, itself.
    lib = lua_header() + (_LUA_DIR / "_lib.lua").read_text()
    return {name: lib + "\n" + (_LUA_DIR / f"{name}.lua").read_text() for name in _SCRIPTS}


_SOURCES = _lua_sources()


_BUCKET_NAMES = tuple(format(n, "03x") for n in range(1 << SEEN_BUCKET_BITS))
_BUCKET_MASK = (1 << SEEN_BUCKET_BITS) - 1


def _bucket(fp: int) -> str:
    """The seen-set suffix of a fingerprint: its top bits, in hex."""
    return _BUCKET_NAMES[(fp >> (64 - SEEN_BUCKET_BITS)) & _BUCKET_MASK]


def _ms(seconds: float) -> int:
    return max(0, round(seconds * 1000))


# Each client's scripts, registered once: registering hashes every script's source, and a
# Frontier is made per action, per live update, per slice.
_registered: weakref.WeakKeyDictionary[redis.Redis, dict[str, Script]] = weakref.WeakKeyDictionary()


def _scripts_of(client: redis.Redis) -> dict[str, Script]:
    scripts = _registered.get(client)
    if scripts is None:
        scripts = _registered[client] = {
            name: client.register_script(src) for name, src in _SOURCES.items()
        }
    return scripts


class HostEvent(NamedTuple):
    """What a script saw happen to a host, for the crawl's log: "parked", "eased" (back to its
    pace after a push-back), "released" (a hold or a parking ran out)."""

    kind: str
    host: str
    text: str


def _host_events(flat: list) -> list[HostEvent]:
    """The flat triples the scripts return (EVENTS in lua/_lib.lua)."""
    text = [item.decode() if isinstance(item, bytes) else str(item) for item in flat]
    return [HostEvent(*text[n : n + 3]) for n in range(0, len(text) - 2, 3)]


def status_class(status: int) -> str:
    """The counter of an HTTP status: status_2xx .. status_5xx, else status_other."""
    klass = status // 100
    return f"status_{klass}xx" if 2 <= klass <= 5 else "status_other"


def _outcome_args(outcome: Outcome) -> list:
    """One outcome as the flat fields complete.lua reads (see the header of that script)."""
    if outcome.kind not in OUTCOME_KINDS:
        raise ValueError(f"unknown outcome kind {outcome.kind!r}; expected {OUTCOME_KINDS}")
    request = outcome.request
    retry_json, listed = "", 0
    links = tail = sitemaps = sitemaps_tail = ""
    # Reading sitemaps costs no depth: what a sitemap lists stays at the sitemap's depth; nor
    # does a redirect: its target is the same page, moved.
    redirect = outcome.links_via == VIA_REDIRECT
    child_depth = request.depth + (0 if request.reads_sitemap or redirect else 1)
    if outcome.kind == "retry":
        history = with_history(request.history, outcome.error)
        retry_json = replace(request, attempts=request.attempts + 1, history=history).pack()
    elif outcome.kind == "crashed":
        again = replace(request, crashes=request.crashes + 1, crash_error=outcome.error[:300])
        retry_json = again.pack()
    elif outcome.kind in ("done", "absent"):
        if outcome.links_via == VIA_LISTED:
            listed = len(outcome.links)
        chain = (*request.redirects, request.url) if redirect else ()
        links, tail = _link_args(outcome.links, request, child_depth, outcome.links_via, chain)
        sitemaps, sitemaps_tail = _link_args(outcome.sitemaps, request, child_depth, VIA_SITEMAP)
    status = "" if outcome.status is None else outcome.status
    return [
        request.fp,
        request.host,
        outcome.kind,
        status,
        outcome.nbytes,
        request.priority,
        child_depth,
        retry_json,
        _ms(outcome.retry_delay),
        listed,
        links,
        tail,
        sitemaps,
        sitemaps_tail,
    ]


def _link_args(
    urls: list[str], parent: Request, depth: int, via: str, redirects: tuple[str, ...] = ()
) -> tuple[str, str]:
    """(links, tail): what complete.lua needs to queue `urls` as Request(url, depth,
    referrer=parent.url, priority=..., via=via, redirects=redirects).pack() would: per URL
    four lines (bucket, fingerprint, host, URL), and once the end of their packed requests,
    the same for every link of the page (request.link_tail). The host of a link on the page's
    own prefix (most of them) is sent as "": the script takes the page's, and no link's host
    is parsed here; the script also makes their referrer relative, as pack() does. One
    argument per page, not three per link: redis-py packs each argument on its own, a
    twentieth of a slice thread's time. A link's URL holds no line break (links and sitemaps
    are in the client's normal form, which escapes them); one that does is sent escaped."""
    if not urls:
        return "", ""
    tail = link_tail(depth, parent.priority, parent.url, via=via, redirects=redirects)
    # Links on the page's prefix (its URL up to the "/" after "://") have its host, which
    # the prefix tells (the script writes no host for them), and a relative referrer.
    origin, host = url_origin(parent.url), parent.host
    own = origin + "/" if origin and parent.url.startswith(origin + "/") else None
    if own and prefix_host(parent.url) != host:
        own = None
    # Per link of every page: made by map (a loop in C), not by a Python loop over the links.
    if any(map(contains, urls, repeat("\n"))):
        urls = [url.replace("\n", "%0A") for url in urls]
    fps = list(map(fingerprint, urls))
    shifted = map(rshift, fps, repeat(64 - SEEN_BUCKET_BITS))
    buckets = map(_BUCKET_NAMES.__getitem__, map(and_, shifted, repeat(_BUCKET_MASK)))  # _bucket
    on_own = list(map(str.startswith, urls, repeat(own))) if own else [False] * len(urls)
    if all(on_own):
        hosts = repeat("")
    else:
        hosts = ["" if mine else _link_host(url) for url, mine in zip(urls, on_own, strict=True)]
    return "".join(map("{}\n{}\n{}\n{}\n".format, buckets, fps, hosts, urls)), tail


def _link_host(url: str) -> str:
    """The host line of a link off the page's prefix (_link_args): "+" and its host when its
    prefix tells it, else "-" and its packed host field ("/" for none)."""
    link_host = request_host(url)
    return "+" + link_host if prefix_host(url) == link_host else "-" + (link_host or "/")
