"""A crawl's Redis keys are listed once (crawls/engine/keys.py): the docs' key map, the scripts'
names for KEYS and the keys a crawl really writes all agree with that table."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from crawls.engine import keys
from crawls.engine.frontier import Frontier, supervisor_lock
from crawls.engine.frontier_alerts import alerts_lock, record_alert_samples
from crawls.engine.frontier_scripts import _lua_sources
from crawls.engine.request import Outcome

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
LUA_DIR = ROOT / "crawls" / "engine" / "lua"
START, END = (
    "<!-- key map: crawls/engine/keys.py render_key_map() -->\n",
    "<!-- end of the key map -->",
)


def test_the_key_map_in_the_docs_is_the_tables():
    text = DOC.read_text()
    assert START in text and END in text, f"{DOC.name} has lost the key map's markers"
    shown = text.split(START, 1)[1].split(END, 1)[0]
    assert shown == keys.render_key_map(), (
        f"docs/architecture.md's key map differs from crawls/engine/keys.py's table: put "
        f"keys.render_key_map() between its markers:\n{keys.render_key_map()}"
    )


def test_every_key_a_script_names_is_bound_from_the_table_and_every_bound_key_is_used():
    bound = set(re.findall(r"^local (K_\w+) = KEYS\[\d+\]$", keys.lua_header(), re.M))
    used = set()
    for path in LUA_DIR.glob("*.lua"):
        source = path.read_text()
        assert "KEYS[" not in source, f"{path.name} counts KEYS by hand: name the key in keys.py"
        used |= set(re.findall(r"\bK_[A-Z]+\b", source))
    assert used - bound == set(), "named in a script, missing from crawls/engine/keys.py"
    assert bound - used == set(), "passed to every script, used by none"
    assert all(source.startswith(keys.lua_header()) for source in _lua_sources().values())


def test_the_scripts_get_the_tables_keys_in_its_order():
    frontier = Frontier(7)
    assert frontier._keys == [f"ch:{{c7}}:{name}" for name in keys.SCRIPT_KEYS]
    assert frontier._overflow_keys == [*frontier._keys, "ch:{c7}:spilling", "ch:{c7}:unspilled"]


def test_a_name_not_in_the_table_is_refused():
    frontier = Frontier(7)
    for name in ("queue", "seen:", "seen:0ab", "seen:*", "*", "robotslock:a.test", "alertseries"):
        assert frontier.key(name) == "ch:{c7}:" + name
    for name in ("queues", "", "hostq2", "seen", "robots:a.test", "ch:supervisor:lock"):
        with pytest.raises(ValueError, match="not one of a crawl's keys"):
            frontier.key(name)


def table_entry(name: str) -> keys.Key | None:
    """The entry of CRAWL_KEYS a key of Redis is (by its whole name), None for none."""
    for key in keys.CRAWL_KEYS:
        shown = key.name if key.reach == keys.ALL_CRAWLS else keys.CRAWL_PREFIX + key.name
        pattern = re.escape(shown.replace("<ID>", "1")).replace(re.escape("<bucket>"), ".+")
        if re.fullmatch(pattern.replace(re.escape("<host>"), ".+"), name):
            return key
    return None


@pytest.mark.once
def test_every_key_a_crawl_writes_is_in_the_table_with_its_type(frontier, redis):
    found: dict[str, str] = {}

    def look() -> None:
        for name in [*redis.scan_iter(match="ch:*", count=1000)]:
            found[name.decode()] = redis.type(name).decode()

    frontier.configure(max_pages=100, max_depth=5, host_delay=0, park_after=0.1, park_for=60)
    frontier.set_host_delay("c.test", 1)
    frontier.add_seeds(
        [f"http://a.test/{n}" for n in range(10)] + ["http://b.test/", "http://c.test/"]
    )
    claimed = frontier.claim(20, lease_seconds=30)
    c_request = next(r for r in claimed if r.host == "c.test")
    frontier.send(c_request)
    frontier.pushed_back("b.test", wait=None, why="HTTP 429")
    look()  # claimed: backup, leases, flying, hostclaim...
    a_requests = [r for r in claimed if r.host == "a.test"]
    b_request = next(r for r in claimed if r.host == "b.test")
    frontier.complete(
        [Outcome(request=r, kind="failed") for r in a_requests[:4]]
        + [Outcome(request=b_request, kind="retry", retry_delay=60)]
        + [Outcome(request=c_request, kind="done", status=200)]
    )
    look()  # a.test failing in a row, a retry waiting
    time.sleep(0.15)
    frontier.complete([Outcome(request=a_requests[4], kind="failed")])  # parked
    frontier.host_hold("b.test", until_ms=frontier.now_ms() + 60_000)
    frontier.release(a_requests[5:])
    frontier.slice_register(["s1"], ttl=60)
    frontier.live_view(record=True)
    frontier.publish_slot(1000)
    frontier.robots_store("a.test", "User-agent: *")
    frontier.robots_lock("a.test")
    frontier.session_store("{}")
    frontier.login_lock("token", ttl=30)
    record_alert_samples({1: (int(time.time()), 1, 0)}, keep_from=0)
    supervisor_lock(30)
    alerts_lock(30)
    token = frontier.overflow_token()
    taken = frontier.spill(token, 2)
    look()  # requests on their way to the database
    frontier.spilled(token, [entry for _, _, entry in taken])
    frontier.unspill(token, taken, mode="queue")
    look()  # rows on their way out of it
    frontier.unspilled(token, [fp for fp, _, _ in taken])

    entries = {name: table_entry(name) for name in found}
    assert [name for name, entry in entries.items() if entry is None] == []
    assert {name: kind for name, kind in found.items() if entries[name].type != kind} == {}
    assert {key.name for key in keys.CRAWL_KEYS} == {entry.name for entry in entries.values()}
