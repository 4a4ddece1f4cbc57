"""What every worker of a crawl shares besides its queue: robots.txt per host, the login session."""

from __future__ import annotations

import time

import redis

from crawls.engine.frontier_scripts import _ms


class FrontierShared:
    """What every worker of a crawl shares besides its queue: robots.txt per host, the login
    session and its lock. Part of Frontier (crawls/engine/frontier.py), whose key() it uses."""

    # robots.txt, cached per host for the crawl

    def robots_text(self, host: str) -> str | None:
        text = self.redis.hget(self.key("robots"), host.lower())
        return text.decode() if text is not None else None

    def robots_store(self, host: str, text: str) -> None:
        self.redis.hset(self.key("robots"), host.lower(), text)

    def robots_lock(self, host: str, ttl: float = 30) -> bool:
        """True for the one worker that should fetch the host's robots.txt; the lock expires
        after ttl seconds in case that worker dies."""
        key = self.key(f"robotslock:{host.lower()}")
        return bool(self.redis.set(key, "1", nx=True, px=max(1, _ms(ttl))))

    def robots_unlock(self, host: str) -> None:
        """The host's robots.txt got no answer: nothing was stored, and the next worker that
        needs it may ask at once rather than wait for the lock to expire."""
        self.redis.delete(self.key(f"robotslock:{host.lower()}"))

    # The login session (crawls/engine/sessions.py), shared by every worker of the crawl

    def session(self) -> dict[str, str]:
        """The session hash as text (empty before the first login)."""
        found = self.redis.hgetall(self.key("session"))
        return {k.decode(): v.decode() for k, v in found.items()}

    def session_store(self, cookies_json: str) -> int:
        """A new session from a login: its cookies, and the next generation (returned), at
        once, so no worker reads the new generation with the old cookies."""
        key = self.key("session")
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping={"cookies": cookies_json, "failed": "", "failed_until": 0})
            pipe.hincrby(key, "gen", 1)
            return int(pipe.execute()[1])

    def session_failed(self, error: str, *, for_seconds: float) -> None:
        """A login that failed: other workers take this error for a while instead of trying."""
        until = int(time.time() * 1000) + _ms(for_seconds)
        self.redis.hset(self.key("session"), mapping={"failed": error, "failed_until": until})

    def session_forget(self) -> None:
        self.redis.unlink(self.key("session"), self.key("loginlock"))

    def login_lock(self, token: str, ttl: float) -> bool:
        """True for the one worker that runs the login step; expires after ttl (it died)."""
        return bool(self.redis.set(self.key("loginlock"), token, nx=True, px=max(1, _ms(ttl))))

    def login_unlock(self, token: str) -> None:
        """Release the lock if it is still ours (it may have expired and been taken)."""
        key = self.key("loginlock")
        with self.redis.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(key)
                if pipe.get(key) == token.encode():
                    pipe.multi()
                    pipe.delete(key)
                    pipe.execute()
            except redis.WatchError:
                pass  # taken by another worker meanwhile: theirs now
