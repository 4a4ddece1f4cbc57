"""The Redis side of a crawl's overflow (the queue past its window waits in the database)."""

from __future__ import annotations

from crawls.engine.request import Request


class OverflowFenced(Exception):
    """An overflow write with a token that is no longer the holder's (it lost its lock in the
    database): refused, and left to the holder now."""


class OverflowStaged(Exception):
    """An earlier step of the overflow is left to finish (crawls/engine/overflow.py): nothing
    new starts until it is."""


def _check_fenced(code: int) -> None:
    if code == -1:
        raise OverflowFenced("this crawl's overflow has another holder now")
    if code == -2:
        raise OverflowStaged("an earlier step of this crawl's overflow is left to finish")


def _fp_of(entry: bytes) -> int:
    """The fingerprint of a queued request (its first field), as lua/_lib.lua's fp_of."""
    if entry[:1] == b"{":
        return Request.unpack(entry).fp
    return int(entry.partition(b"\n")[0])


class FrontierOverflow:
    """The overflow's Redis side, part of Frontier (crawls/engine/frontier.py), whose key() and
    _run_overflow() it uses: crawls/engine/overflow.py holds the database's side and the order
    of the steps. Every write takes the holder's token and is refused (OverflowFenced) for one
    that is no longer current."""

    def overflow_token(self) -> str:
        """A new holder of the crawl's overflow (under its lock in the database): the token
        its writes carry; any older token is refused from now on."""
        return str(self.redis.hincrby(self.key("config"), "overflow_token", 1))

    def overflow_sizes(self) -> tuple[int, int]:
        """(queued, spilled) at one moment."""
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.zcard(self.key("queue"))
            pipe.hget(self.key("stats"), "spilled")
            queued, spilled = pipe.execute()
        return int(queued), int(spilled or 0)

    def overflow_staged(self) -> tuple[list[tuple[int, int, str]], list[int]]:
        """What a holder cut short left: the requests taken for the database, (fp, score,
        packed) each, and the fingerprints whose rows are to be removed."""
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.zrange(self.key("spilling"), 0, -1, withscores=True)
            pipe.smembers(self.key("unspilled"))
            spilling, unspilled = pipe.execute()
        taken = [(_fp_of(entry), int(score), entry.decode()) for entry, score in spilling]
        return taken, sorted(int(fp) for fp in unspilled)

    def spill(self, token: str, count: int) -> list[tuple[int, int, str]]:
        """Take the `count` lowest-ranked queued requests for the database (spill.lua):
        (fp, score, packed) each. OverflowStaged while an earlier step is left to finish."""
        found = self._run_overflow("spill", [token, count])
        _check_fenced(found[0] if found and not isinstance(found[0], bytes) else 0)
        return [
            (_fp_of(found[i]), int(float(found[i + 1])), found[i].decode())
            for i in range(0, len(found), 2)
        ]

    def spilled(self, token: str, entries: list[str]) -> None:
        """The requests spill() took are in the database now: they leave Redis."""
        if entries:
            _check_fenced(int(self._run_overflow("spilled", [token, *entries])))

    def unspill(self, token: str, rows: list[tuple[int, int, str]], *, mode: str) -> int:
        """Rows (fp, score, packed) leave the database's overflow: back into the queue with
        their scores ("queue"), or dropped, counted in "cancelled" ("cancel": a host's drop)
        and in "descoped" too ("drop": out of the crawl's scope). Returns how many; 0 for a
        cancelled crawl (its rows are purged)."""
        if mode not in ("queue", "drop", "cancel"):
            raise ValueError(f"unknown mode {mode!r}")
        args: list = [token, mode]
        for fp, score, packed in rows:
            args += [fp, score, packed]
        count = int(self._run_overflow("unspill", args))
        _check_fenced(count)
        return max(0, count)

    def unspilled(self, token: str, fps: list[int]) -> None:
        """The rows of these fingerprints are removed from the database: forgotten here."""
        if fps:
            _check_fenced(int(self._run_overflow("unspilled", [token, *fps])))

    def overflow_forget(self) -> None:
        """A cancelled crawl's rows are purged: nothing of the overflow is left in Redis."""
        self.redis.delete(self.key("spilling"), self.key("unspilled"))
