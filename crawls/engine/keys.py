"""A crawl's Redis keys, listed once: name, Redis type, how the code reaches it, what it holds.

Everything else that names these keys is drawn from CRAWL_KEYS:
- the KEYS every frontier script gets, in the table's order (crawls/engine/frontier.py,
  Frontier._keys and Frontier._overflow_keys);
- the Lua names they are bound to (K_QUEUE, K_STATS...: lua_header(), put before each script
  where frontier.py loads them, so crawls/engine/lua/ never counts KEYS by hand);
- which names Frontier.key() builds (no other);
- the key map in docs/architecture.md ("A crawl's Redis keys"), which is render_key_map()'s
  text; tests/engine/test_key_map.py fails when the two differ.

Every per-crawl key carries the crawl's id as a hash tag, ch:{c<ID>}:, and no script touches
two crawls' keys: a crawl can live wholly on one of several Redis instances (see
docs/architecture.md, "One Redis, and the path past it").
"""

from __future__ import annotations

import re
from typing import NamedTuple

CRAWL_PREFIX = "ch:{c<ID>}:"
SUPERVISOR_LOCK_KEY = "ch:supervisor:lock"
ALERTS_LOCK_KEY = "ch:alerts:lock"

# How a key is reached. The order of the first two is the order of KEYS in every script.
SCRIPTS = "KEYS"  # in every script's KEYS
OVERFLOW = "KEYS, overflow"  # only the overflow's scripts and cancel get it, after the others
ARGUMENT = "argument"  # a script builds it from a prefix it gets as an argument
PYTHON = "Python"  # only frontier.py's Python reads and writes it
ALL_CRAWLS = "all crawls"  # one key shared by every crawl, outside any crawl's prefix

REACHES = {
    SCRIPTS: "in the KEYS of every frontier script, in this order",
    OVERFLOW: "in KEYS only for the overflow's scripts and cancel, after the others",
    ARGUMENT: "scripts build it from a prefix passed as an argument",
    PYTHON: "read and written from Python only",
    ALL_CRAWLS: "one key for every crawl, outside the crawl's prefix",
}


class Key(NamedTuple):
    name: str  # after the crawl's prefix ("<host>" marks a part that varies); whole if shared
    type: str  # as Redis' TYPE answers
    reach: str  # one of REACHES
    holds: str  # Markdown: what reads as a tag (<ms>) in backticks

    @property
    def lua(self) -> str:
        """The Lua name of a key in KEYS: K_ and its name in capitals."""
        return "K_" + self.name.upper()


CRAWL_KEYS: tuple[Key, ...] = (
    Key("queue", "zset", SCRIPTS, "packed request -> score (priority, then depth, then turn)"),
    Key("delayed", "zset", SCRIPTS, "packed request -> ready time ms (retries waiting)"),
    Key("backup", "hash", SCRIPTS, "fp -> packed request, for every claimed unfinished request"),
    Key("leases", "zset", SCRIPTS, "fp -> lease deadline ms"),
    Key("stats", "hash", SCRIPTS, "counters, only ever HINCRBY"),
    Key("state", "string", SCRIPTS, "running / paused / cancelled"),
    Key("config", "hash", SCRIPTS,
        "max_pages, max_depth, host_delay_ms, host_concurrency, park_after_ms, park_ms, "
        "scope_gen (changes of the scope while it runs), overflow_token (the overflow's holder)"),
    Key("hosts", "hash", SCRIPTS, "host -> next allowed time ms (last send + delay, or push-back)"),
    Key("hostdelay", "hash", SCRIPTS, "host -> delay ms overriding the default (Crawl-delay)"),
    Key("hostseq", "hash", SCRIPTS, "host -> requests it queued: a request's turn for the score"),
    Key("slices", "zset", SCRIPTS, "slice id -> alive-until ms (queued or running slice jobs)"),
    Key("hostq", "hash", SCRIPTS, "host -> requests of that host in the queue (exact)"),
    Key("series", "list", SCRIPTS, "`unix_s:responses`, at most one a second, the last 10 min"),
    Key("hostclaim", "hash", SCRIPTS, "host -> fp of its request claimed and not yet answered"),
    Key("hostslow", "hash", SCRIPTS, "host -> delay ms while it pushes back (429, 503), easing"),
    Key("hostwhy", "hash", SCRIPTS, "host -> `<ms> <why>` of its last push-back"),
    Key("flying", "hash", SCRIPTS, "fp -> host, for every claimed request not yet answered"),
    Key("hostflight", "hash", SCRIPTS, "host -> how many of those (exact; 0 is no field)"),
    Key("hostdone", "hash", SCRIPTS, "host -> requests it answered"),
    Key("hosterrors", "hash", SCRIPTS,
        "host -> requests it did not answer (errors, retries, failures)"),
    Key("hostheld", "hash", SCRIPTS, "host -> held until ms (an operator's hold, or parked)"),
    Key("hostfail", "hash", SCRIPTS, "host -> `<ms> <n>`: its requests failing in a row since"),
    Key("hostparked", "hash", SCRIPTS, "host -> why it was parked (held for failing too long)"),
    Key("spilling", "zset", OVERFLOW,
        "packed request -> score: taken from the queue's tail, being written to the database "
        "(crawls/engine/overflow.py)"),
    Key("unspilled", "set", OVERFLOW,
        "fps whose database rows left the overflow (queued again, or dropped) and are being "
        "removed"),
    Key(
        "seen:<bucket>",
        "set",
        ARGUMENT,
        "64-bit fingerprints, 4096 buckets (intsets up to set-max-intset-entries: 8,192 embedded)",
    ),
    Key("robots", "hash", PYTHON, "host -> robots.txt text"),
    Key("robotslock:<host>", "string", PYTHON, "one worker fetches a host's robots.txt"),
    Key("publish", "string", PYTHON, "a live snapshot went out less than N ms ago (throttle)"),
    Key("alertseries", "list", PYTHON,
        "`unix_s:responses:errors`, one per pass of the alert checks (crawls/alert_checks.py), "
        "never per page"),
    Key("session", "hash", PYTHON,
        "gen, cookies (JSON), failed (login error), failed_until ms: the session the login "
        "step got, shared by every worker"),
    Key("loginlock", "string", PYTHON, "one worker runs the login step (a token, expires)"),
    Key(SUPERVISOR_LOCK_KEY, "string", ALL_CRAWLS, "one supervisor at a time, across all crawls"),
    Key(ALERTS_LOCK_KEY, "string", ALL_CRAWLS, "one pass of the alert checks at a time"),
)  # fmt: skip

# The names KEYS holds, in order: every script's, then the overflow's two.
SCRIPT_KEYS = tuple(key.name for key in CRAWL_KEYS if key.reach == SCRIPTS)
OVERFLOW_KEYS = SCRIPT_KEYS + tuple(key.name for key in CRAWL_KEYS if key.reach == OVERFLOW)

# What Frontier.key() accepts: a name of the table, a varying one's stem and anything after it
# ("seen:", "seen:0ab", "robotslock:a.test"), or a SCAN pattern of them ("*", "seen:*").
_NAMES = frozenset(key.name for key in CRAWL_KEYS if key.reach != ALL_CRAWLS)
_STEMS = frozenset(key.name.split("<")[0] for key in CRAWL_KEYS if "<" in key.name)
_STEM = re.compile(r"[a-z]+:")


def is_crawl_key(name: str) -> bool:
    """Whether `name` (after a crawl's prefix) is one of CRAWL_KEYS, or the SCAN pattern "*"."""
    if name in _NAMES or name in _STEMS or name == "*":
        return True
    stem = _STEM.match(name)
    return stem is not None and stem.group() in _STEMS


def lua_header() -> str:
    """The Lua that binds KEYS to the scripts' names for them (K_QUEUE = KEYS[1], ...)."""
    lines = [
        "-- Generated from crawls/engine/keys.py (CRAWL_KEYS) by crawls/engine/frontier.py:",
        "-- KEYS as Frontier passes them. The overflow's keys are nil in the scripts that get",
        "-- only the others.",
    ]
    by_name = {key.name: key for key in CRAWL_KEYS}
    for number, name in enumerate(OVERFLOW_KEYS, start=1):
        lines.append(f"local {by_name[name].lua} = KEYS[{number}]")
    return "\n".join(lines) + "\n"


def render_key_map() -> str:
    """The key map as docs/architecture.md shows it (Markdown), from CRAWL_KEYS."""
    lines = ["| key | type | reached by | holds |", "|---|---|---|---|"]
    for key in CRAWL_KEYS:
        shown = key.name if key.reach == ALL_CRAWLS else CRAWL_PREFIX + key.name
        holds = key.holds.replace("|", "\\|")  # a table cell's text
        lines.append(f"| `{shown}` | {key.type} | {key.reach} | {holds} |")
    lines.append("")
    lines.append("Reached by:")
    lines.extend(f"- {reach}: {meaning}." for reach, meaning in REACHES.items())
    return "\n".join(lines) + "\n"
