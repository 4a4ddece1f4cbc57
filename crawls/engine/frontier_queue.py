"""A crawl's queue read and pruned: the queue view's counts and pages, a change of scope."""

from __future__ import annotations

import base64
import math
from collections.abc import Callable

from crawls.engine.request import Request

# The queue view reads at most this many (priority, depth) groups of the queue.
DEPTH_GROUPS = 10_000


class FrontierQueue:
    """What is queued, part of Frontier (crawls/engine/frontier.py), whose key() and _run() it
    uses: pruned when the scope changes while the crawl runs (crawls/engine/scope_changes.py),
    and read for the queue view. Every read of queued entries is here or in frontier.py,
    decoded by Request.unpack."""

    def scope_change(self) -> tuple[int, list[Request]]:
        """The crawl's include or exclude patterns changed: the next scope generation, which
        every claim from now on returns (claim.lua), and the requests claimed at this moment,
        read in the same MULTI: those were handed out under the scope before, and any other
        request is claimed under the new one."""
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hincrby(self.key("config"), "scope_gen", 1)
            pipe.hvals(self.key("backup"))
            gen, claimed = pipe.execute()
        return int(gen), [Request.unpack(member) for member in claimed]

    def scope_generation(self) -> int:
        return int(self.redis.hget(self.key("config"), "scope_gen") or 0)

    def drop_claimed(self, requests: list[Request]) -> int:
        """Drop claimed requests that will not be fetched, because they no longer fit the
        crawl's scope (counted in "cancelled" and "descoped"). Returns how many were still
        claimed."""
        if not requests:
            return 0
        return int(self._run("drop_claimed", [request.fp for request in requests]))

    def drop_unfit(
        self,
        fits: Callable[[Request], bool],
        *,
        cursor: str = "",
        budget: int = 5000,
        batch: int = 500,
    ) -> tuple[int, str]:
        """Drop the queued requests and retries that `fits` refuses (counted in "cancelled" and
        "descoped"), looking at about `budget` entries from `cursor` ("": the start), `batch`
        at a time, each batch dropped in one script call (an entry claimed meanwhile is not
        counted). Returns (how many were dropped, the cursor to go on from; "" once the queue
        and the retries were looked at whole). Entries that stay queued from start to end are
        each looked at; those added meanwhile may not be (a slice sorts each claim itself)."""
        where, _, position = cursor.partition(":") if cursor else ("queue", "", "0")
        if where not in ("queue", "delayed") or not position.isdigit():
            raise ValueError(f"not a cursor of drop_unfit: {cursor[:40]!r}")
        dropped, seen = 0, 0
        while seen < budget:
            position, found = self.redis.zscan(self.key(where), int(position), count=batch)
            seen += len(found)
            doomed = [member for member, _ in found if not fits(Request.unpack(member))]
            if doomed:
                dropped += int(self._run("drop_queued", [where, *doomed]))
            if position == 0 and where == "queue":
                where = "delayed"
            elif position == 0:
                return dropped, ""
        return dropped, f"{where}:{position}"

    def queue_counts(self) -> dict:
        """What waits, counted without reading a request, in one MULTI: "queued",
        "spilled" (in the database: the queue past its window) and "retrying" (delayed
        retries), "hosts" (of the queue in Redis) (host -> queued requests, most first) and
        "depths" (depth -> queued requests, shallowest first; from the scores, depth 4095 and
        over as 4095), "depths_partial" when more than DEPTH_GROUPS (priority, depth) groups
        were left out."""
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.zcard(self.key("queue"))
            pipe.zcard(self.key("delayed"))
            pipe.hgetall(self.key("hostq"))
            self._scripts["queue_depths"](keys=self._keys, args=[DEPTH_GROUPS], client=pipe)
            pipe.hget(self.key("stats"), "spilled")
            queued, retrying, hosts, groups, spilled = pipe.execute()
        depths: dict[int, int] = {}
        for i in range(0, len(groups) - 1, 3):
            depth = int(groups[i + 1])
            depths[depth] = depths.get(depth, 0) + int(groups[i + 2])
        by_host = sorted(((h.decode(), int(n)) for h, n in hosts.items()), key=lambda x: -x[1])
        return {
            "queued": int(queued),
            "spilled": int(spilled or 0),
            "retrying": int(retrying),
            "hosts": dict(by_host),
            "depths": dict(sorted(depths.items())),
            "depths_partial": bool(groups[-1]),
        }

    def queue_page(self, *, after: str = "", size: int = 50) -> tuple[list[Request], str]:
        """Up to `size` queued requests in the order they are to be claimed, after a cursor
        this method returned ("": from the head). Returns (the requests, the cursor of the
        next ones; "" when none followed). ValueError for a cursor it did not make. Claims
        and new links move the queue meanwhile: a page goes on from where the last one ended,
        whatever left the queue before it."""
        score, member = "", b""
        if after:
            try:
                score_text, _, member = base64.urlsafe_b64decode(after.encode()).partition(b" ")
                score = score_text.decode()
                if not member or not math.isfinite(float(score)):
                    raise ValueError(score)
            except ValueError:
                raise ValueError("not a cursor of this crawl's queue") from None
        found = self._run("queue_page", [size + 1, score, member])  # one more: is there a next?
        entries, scores = found[0 : 2 * size : 2], found[1 : 2 * size : 2]
        requests = [Request.unpack(entry) for entry in entries]
        if len(found) <= 2 * size:
            return requests, ""
        return requests, base64.urlsafe_b64encode(scores[-1] + b" " + entries[-1]).decode()
