"""A crawl's hosts in its frontier: pace, push-backs, per-host rows, hold, release, drop."""

from __future__ import annotations

from typing import NamedTuple

from crawls.engine.frontier_scripts import _ms


class PushBack(NamedTuple):
    delay: float  # the host's delay now, seconds
    raised: bool  # this push-back raised it


class FrontierHosts:
    """A crawl's hosts in its frontier: their pace (a host's delay, push-backs), what each one is
    doing, and an operator's hold, release and drop. Part of Frontier (crawls/engine/frontier.py),
    whose key() and _run() it uses."""

    def set_host_delay(self, host: str, seconds: float) -> None:
        """Override the crawl's host delay for one host (e.g. robots.txt Crawl-delay)."""
        self.redis.hset(self.key("hostdelay"), host.lower(), _ms(seconds))

    def pace(self, host: str) -> float:
        """May a fetch made outside a page's turn (the login step) go to the host now? 0: yes,
        and the host's delay runs from now; else the seconds to wait before asking again."""
        return int(self._run("pace", [host.lower(), "send"])) / 1000

    def paced(self, host: str) -> None:
        """That fetch got its answer: the host's delay runs from now too (as answered())."""
        self._run("pace", [host.lower(), "answered"])

    def pushed_back(self, host: str, *, wait: float | None, why: str) -> PushBack:
        """The host answered 429 or 503 (`wait`: its Retry-After in seconds, if any): every
        worker slows down on it, and eases back as it answers normally again. Returns the
        host's delay in seconds now, and whether this push-back raised it."""
        wait_ms = "" if wait is None else _ms(wait)
        delay, raised = self._run("push_back", [host.lower(), wait_ms, why[:200]])
        return PushBack(delay=int(delay) / 1000, raised=bool(raised))

    def delayed_hosts(self) -> frozenset[str]:
        """The hosts with a delay of their own (a robots.txt Crawl-delay) or slowed down for
        pushing back. In a crawl with no delay and no cap these are the only hosts whose
        requests must take their turn (send, answered): any other host is asked at once."""
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hkeys(self.key("hostdelay"))
            pipe.hkeys(self.key("hostslow"))
            own, slowed = pipe.execute()
        return frozenset(host.decode() for host in (*own, *slowed))

    def host_hold(self, host: str, *, until_ms: int) -> None:
        """Give the host no request until until_ms (Redis time, ms); claimed ones go on."""
        self._run("host_hold", [host.lower(), int(until_ms)])

    def host_release(self, host: str) -> None:
        """End a hold: the host may be asked again as its delay allows."""
        self._run("host_hold", [host.lower(), ""])

    def host_drop(self, host: str) -> int:
        """Drop the host's queued requests and retries (counted in "cancelled"). Returns how
        many."""
        return int(self._run("host_drop", [host.lower()]))

    def host_rows(self) -> list[dict]:
        """Per host the crawl knows of (queued, in flight, answered or erred): "host",
        "queued", "in_flight", "done", "errors", "delay" (seconds now, a push-back's
        included), "next_at" and "held_until" (Redis ms, 0 for none) and "why" (why it is
        parked or slowed, "" when it is not), read in one MULTI."""
        names = (
            "hostq",
            "hostflight",
            "hostdone",
            "hosterrors",
            "hostdelay",
            "hostslow",
            "hosts",
            "hostheld",
            "hostwhy",
            "hostparked",
        )
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hget(self.key("config"), "host_delay_ms")
            for name in names:
                pipe.hgetall(self.key(name))
            default, *maps = pipe.execute()
        by = {
            name: {host.decode(): value.decode() for host, value in found.items()}
            for name, found in zip(names, maps, strict=True)
        }
        hosts = set(by["hostq"]) | set(by["hostflight"]) | set(by["hostdone"])
        hosts |= set(by["hosterrors"]) | set(by["hostheld"])
        rows = []
        for host in sorted(hosts):
            base = int(by["hostdelay"].get(host, default or 0))
            delay = max(base, int(by["hostslow"].get(host, 0)))
            why = by["hostwhy"].get(host, "").partition(" ")[2] if host in by["hostslow"] else ""
            why = "; ".join(filter(None, (by["hostparked"].get(host, ""), why)))
            rows.append(
                {
                    "host": host,
                    "queued": int(by["hostq"].get(host, 0)),
                    "in_flight": int(by["hostflight"].get(host, 0)),
                    "done": int(by["hostdone"].get(host, 0)),
                    "errors": int(by["hosterrors"].get(host, 0)),
                    "delay": delay / 1000,
                    "next_at": int(by["hosts"].get(host, 0)),
                    "held_until": int(by["hostheld"].get(host, 0)),
                    "why": why,
                }
            )
        return rows
