"""The live proxy pool in Redis. This module owns every proxy key and Lua script.

Shape (after the article in shared/seeds/000 and haipproxy's rules in 001):

- ``global``   sorted set, proxy -> latency ms (lowest first). Membership means "in the pool".
- ``score``    sorted set, proxy -> haipproxy score (start 5, +1 per success, smaller steps
               above 10; a timeout costs 1, 0 removes; a refused connection removes at once).
- ``checked``  sorted set, proxy -> last successful validation (unix ms).
- ``url``      hash, proxy -> URL with credentials (the member itself carries none).
- ``chan:<c>`` sorted set per channel of the proxies free to take: least_used scores by times
               used; round_robin and greedy score by queue position (head = lowest).
- ``tier:<c>`` proxy -> the tier of the selection rule it entered the channel under (1 strict,
               2 recent and fast, 3 score only): a member that falls below it leaves the channel.
- ``topup``    hash, channel (or channel|empty) -> no top-up (or refill) scan before (unix ms).
- ``lease:<c>``, ``held:<c>``  who holds what: proxy -> deadline, proxy -> "token|score".
- ``banned:<c>`` proxy -> ban deadline: a ban is per channel, the global pool is untouched.
- ``blocked``  set of proxies an admin removed or disabled: a validation that was already under
               way cannot put them back; enabling a proxy unblocks it.

Every read-then-write is one Lua script; every key shares the ``{px}`` hash tag, so the scripts
run on one Redis Cluster slot. Time comes from Redis (TIME) so leases agree across machines.
A removed proxy never comes back through a late release: release checks the lease token and
that the proxy is still in the global pool before putting it back.
"""

from __future__ import annotations

import contextlib
import functools
import secrets
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass

import redis
from django.conf import settings

from crawlhub import connections
from crawlhub.connections import get_redis

PREFIX = "px:{px}:"
GLOBAL = PREFIX + "global"
SCORE = PREFIX + "score"
CHECKED = PREFIX + "checked"
URLS = PREFIX + "url"
CHANNELS = PREFIX + "channels"
STATS = PREFIX + "stats"
OKS = PREFIX + "ok"
ERRS = PREFIX + "err"
DROPPED = PREFIX + "dropped"
LOCK = PREFIX + "validating"
BLOCKED = PREFIX + "blocked"
PUBLISH = PREFIX + "publish"  # a health snapshot went out less than N ms ago (throttle)

STRATEGIES = ("least_used", "round_robin", "greedy")
REASONS = ("timeout", "refused", "ban", "error")
INITIAL_SCORE = 5.0


@dataclass(frozen=True)
class Lease:
    proxy: str  # "scheme://host:port" id used in Redis
    url: str  # with credentials, to pass to requests
    channel: str
    token: str


@functools.lru_cache(maxsize=4096)
def _chan(channel: str) -> tuple[str, str, str, str]:
    return (PREFIX + f"chan:{channel}", PREFIX + f"lease:{channel}", PREFIX + f"held:{channel}",
            PREFIX + f"banned:{channel}")  # fmt: skip


# Shared Lua helpers, prepended to the scripts that need them.
_LIB = """
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function round2(x) return math.floor(x * 100 + 0.5) / 100 end
-- haipproxy: +1 per success, and above 10 the step shrinks to round(10/score, 2).
local function raised(score)
  if score > 10 then return round2(score + round2(10 / score)) end
  return score + 1
end
-- Out of every pool at once: global, score, checked, url and each channel's sets.
local function remove_all(prefix, p)
  redis.call('ZREM', prefix .. 'global', p)
  redis.call('ZREM', prefix .. 'score', p)
  redis.call('ZREM', prefix .. 'checked', p)
  redis.call('HDEL', prefix .. 'url', p)
  for _, c in ipairs(redis.call('SMEMBERS', prefix .. 'channels')) do
    redis.call('ZREM', prefix .. 'chan:' .. c, p)
    redis.call('ZREM', prefix .. 'lease:' .. c, p)
    redis.call('HDEL', prefix .. 'held:' .. c, p)
    redis.call('ZREM', prefix .. 'banned:' .. c, p)
    redis.call('HDEL', prefix .. 'tier:' .. c, p)
  end
end
-- Back into a channel pool: least_used counts one more use, the queues go to the tail
-- (greedy: a proxy that was fast goes back to the head, so it is used again next).
local function put_back(chan, p, base, strategy, head)
  if strategy == 'least_used' then
    redis.call('ZADD', chan, 'INCR', base + 1, p)
    return
  end
  if head then
    local first = redis.call('ZRANGE', chan, 0, 0, 'WITHSCORES')
    redis.call('ZADD', chan, (first[2] and tonumber(first[2]) or 0) - 1, p)
  else
    local last = redis.call('ZRANGE', chan, -1, -1, 'WITHSCORES')
    redis.call('ZADD', chan, (last[2] and tonumber(last[2]) or 0) + 1, p)
  end
end
-- held:<c> values are "token|score in the channel when taken|strategy".
local function split_held(h)
  local a = string.find(h, '|', 1, true)
  local b = string.find(h, '|', a + 1, true)
  return string.sub(h, 1, a - 1), tonumber(string.sub(h, a + 1, b - 1)), string.sub(h, b + 1)
end
-- Leases past their deadline come back to the channel pool (their holder died).
local function reap(prefix, c, now, limit)
  local chan, lease, held = prefix .. 'chan:' .. c, prefix .. 'lease:' .. c, prefix .. 'held:' .. c
  local expired = redis.call('ZRANGEBYSCORE', lease, '-inf', now, 'LIMIT', 0, limit)
  for _, p in ipairs(expired) do
    local h = redis.call('HGET', held, p)
    redis.call('ZREM', lease, p)
    redis.call('HDEL', held, p)
    if h and redis.call('ZSCORE', prefix .. 'global', p) then
      local _, base, strategy = split_held(h)
      put_back(chan, p, base, strategy, false)
    end
  end
  if #expired > 0 then redis.call('HINCRBY', prefix .. 'stats', 'reaped', #expired) end
  return #expired
end
"""

# The two halves of a lease (take, give_back) and the selection rule as Lua functions, so that
# acquire, release and keep run the very same checks.
_LEASES = """
-- Where a proxy stands under the selection rule: 1 strict (score, recent and fast), 2 recent
-- and fast, 3 score only, 4 none of them. rule = {min_score, max_age, max_latency, need, scan}.
local function tier(prefix, p, latency, now, rule)
  local score = tonumber(redis.call('ZSCORE', prefix .. 'score', p) or '0')
  local checked = tonumber(redis.call('ZSCORE', prefix .. 'checked', p) or '0')
  local good = score > rule[1]
  local recent_and_fast = checked >= now - rule[2] and latency <= rule[3]
  if good and recent_and_fast then return 1 end
  if recent_and_fast then return 2 end
  if good then return 3 end
  return 4
end
-- Still fit for the channel under the rule that admitted it (tier:<c>); a member from before
-- tiers were recorded only has to pass some tier.
local function fits(prefix, channel, p, now, rule)
  local latency = redis.call('ZSCORE', prefix .. 'global', p)
  if not latency then return false end
  local admitted = tonumber(redis.call('HGET', prefix .. 'tier:' .. channel, p) or '3')
  return tier(prefix, p, tonumber(latency), now, rule) <= admitted
end
-- Add up to `want` of the best global proxies the channel has not got: strict rule first, and
-- only when that leaves fewer than wanted, relaxed (counted when a relaxed tier supplied one).
local function fill(prefix, channel, chan, held, banned, now, strategy, rule, want)
  local members = redis.call('ZRANGE', prefix .. 'global', 0, rule[5] - 1, 'WITHSCORES')
  local tiers = {{}, {}, {}}
  for i = 1, #members, 2 do
    local p, latency = members[i], tonumber(members[i + 1])
    local usable = not redis.call('ZSCORE', chan, p) and redis.call('HEXISTS', held, p) == 0
    if usable then
      local ban = redis.call('ZSCORE', banned, p)
      if ban and tonumber(ban) > now then usable = false
      elseif ban then redis.call('ZREM', banned, p) end
    end
    if usable then
      local t = tier(prefix, p, latency, now, rule)
      if t < 4 then table.insert(tiers[t], p) end
    end
  end
  local chosen, relaxed = {}, false
  for t = 1, 3 do
    for _, p in ipairs(tiers[t]) do
      if #chosen < want then
        table.insert(chosen, {p, t})
        relaxed = relaxed or t > 1
      end
    end
  end
  if #chosen == 0 then return 0 end
  -- least_used: newcomers start at the least used free proxy's count, a fraction of a use apart
  -- so that the better tier and lower latency come first; the queues take them at the tail.
  local edge = redis.call('ZRANGE', chan, strategy == 'least_used' and 0 or -1,
                          strategy == 'least_used' and 0 or -1, 'WITHSCORES')
  local start = edge[2] and tonumber(edge[2]) or 0
  local tier_key = prefix .. 'tier:' .. channel
  for i, c in ipairs(chosen) do
    redis.call('ZADD', chan, start + (strategy == 'least_used' and i / 1e6 or i), c[1])
    redis.call('HSET', tier_key, c[1], c[2])
  end
  if relaxed then
    redis.call('HINCRBY', prefix .. 'stats', 'relaxed', 1)
    redis.call('HINCRBY', prefix .. 'stats', 'relaxed:' .. channel, 1)
  end
  redis.call('HINCRBY', prefix .. 'stats', 'refills', 1)
  return #chosen
end
-- An empty channel is refilled with up to a channel's worth; one with free proxies but fewer
-- than PROXY_CHANNEL_SIZE (free + leased) is topped up. A top-up that found too few waits a
-- second before the next; a refill that found nothing at all waits a second too, or until the
-- channel's next ban runs out if sooner (topup fields `<c>` and `<c>|empty`; a validation
-- success ends both waits), so a channel the global pool cannot feed is not rescanned on every
-- acquire. No scan at all when every global proxy is already the channel's or banned from it.
local TOP_UP_MS = 1000
local function refill(prefix, channel, chan, lease, held, banned, now, strategy, rule)
  local free, leased = redis.call('ZCARD', chan), redis.call('ZCARD', lease)
  if free > 0 and free + leased >= rule[4] then return end
  local field = free == 0 and channel .. '|empty' or channel
  local wait = redis.call('HGET', prefix .. 'topup', field)
  if wait and tonumber(wait) > now then return end
  local want = free == 0 and rule[4] or rule[4] - free - leased
  local outside = redis.call('ZCARD', prefix .. 'global') - free - leased
                  - redis.call('ZCOUNT', banned, '(' .. now, '+inf')
  if outside <= 0 then return end
  local added = fill(prefix, channel, chan, held, banned, now, strategy, rule, want)
  if free > 0 and added < want then
    redis.call('HSET', prefix .. 'topup', field, now + TOP_UP_MS)
  elseif free == 0 and added == 0 then
    local until_ms = now + TOP_UP_MS
    local ban = redis.call('ZRANGEBYSCORE', banned, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if ban[2] then until_ms = math.min(until_ms, tonumber(ban[2])) end
    redis.call('HSET', prefix .. 'topup', field, until_ms)
  end
end
-- Lease the head of the channel pool to `token`, refilled or topped up from the global pool.
-- A member that no longer fits the rule that admitted it leaves the channel as it comes up.
-- Proxies in `exclude` (tried already for this page) are passed over while another is free.
-- Returns {proxy, url} or false when the channel has no proxy to give.
local function take(prefix, channel, chan, lease, held, banned, now, lease_ms, strategy, token,
                    rule, exclude)
  redis.call('SADD', prefix .. 'channels', channel)
  reap(prefix, channel, now, 100)
  refill(prefix, channel, chan, lease, held, banned, now, strategy, rule)
  local skipped, p, base = {}, nil, nil
  for _ = 1, 2 do
    local evicted = false
    while true do
      local top = redis.call('ZPOPMIN', chan)
      if #top == 0 then break end
      if exclude[top[1]] then
        table.insert(skipped, top)
      elseif fits(prefix, channel, top[1], now, rule) then
        p, base = top[1], top[2]
        break
      else
        redis.call('HDEL', prefix .. 'tier:' .. channel, top[1])
        redis.call('HINCRBY', prefix .. 'stats', 'evicted', 1)
        evicted = true
      end
    end
    if p or not evicted then break end
    -- Evictions emptied the channel: bring in what fits now.
    refill(prefix, channel, chan, lease, held, banned, now, strategy, rule)
  end
  -- Only tried ones are free: the first that still fits the rule, not none; the others go
  -- back, and those that no longer fit leave the channel as they would have above.
  for _, s in ipairs(skipped) do
    if p then
      redis.call('ZADD', chan, s[2], s[1])
    elseif fits(prefix, channel, s[1], now, rule) then
      p, base = s[1], s[2]
    else
      redis.call('HDEL', prefix .. 'tier:' .. channel, s[1])
      redis.call('HINCRBY', prefix .. 'stats', 'evicted', 1)
    end
  end
  if not p then
    redis.call('HINCRBY', prefix .. 'stats', 'empty', 1)
    return false
  end
  redis.call('ZADD', lease, now + lease_ms, p)
  redis.call('HSET', held, p, token .. '|' .. base .. '|' .. strategy)
  redis.call('HINCRBY', prefix .. 'stats', 'acquired', 1)
  return {p, redis.call('HGET', prefix .. 'url', p) or p}
end
-- A success through `p`: its latency in the global pool, a score step, one more ok.
local function record_ok(prefix, p, latency, initial)
  redis.call('ZADD', prefix .. 'global', 'XX', latency, p)
  local score = tonumber(redis.call('ZSCORE', prefix .. 'score', p) or initial)
  redis.call('ZADD', prefix .. 'score', raised(score), p)
  redis.call('HINCRBY', prefix .. 'ok', p, 1)
end
-- Give back the proxy `p` leased to `token` with its outcome: '1' ok, '0' failed, '2' ok and
-- already recorded (keep() did). 0 (and nothing changes) when the token no longer holds it
-- (lease expired, or taken since); 0 too when it was removed meanwhile.
local function give_back(prefix, chan, lease, held, p, token, latency, outcome, greedy_ms,
                         initial)
  local h = redis.call('HGET', held, p)
  if not h then return 0 end
  local holder, base, strategy = split_held(h)
  if holder ~= token then return 0 end
  redis.call('HDEL', held, p)
  redis.call('ZREM', lease, p)
  -- Removed while leased: it stays out (remove already cleared the lease; belt and braces).
  if not redis.call('ZSCORE', prefix .. 'global', p) then return 0 end
  local ok = outcome ~= '0'
  put_back(chan, p, base, strategy, strategy == 'greedy' and ok and latency < greedy_ms)
  if outcome == '1' then
    record_ok(prefix, p, latency, initial)
  elseif outcome == '0' then
    redis.call('HINCRBY', prefix .. 'err', p, 1)
  end
  redis.call('HINCRBY', prefix .. 'stats', 'released', 1)
  return 1
end
-- ARGV from `first` on: min_score max_age_ms max_latency_ms need scan -> the rule table.
local function rule_from(a, first)
  local rule = {}
  for i = 0, 4 do rule[i + 1] = tonumber(a[first + i]) end
  return rule
end
local function set_of(a, first)
  local set = {}
  for i = first, #a do set[a[i]] = true end
  return set
end
"""

# KEYS: chan lease held banned. ARGV: prefix channel lease_ms strategy token min_score
# max_age_ms max_latency_ms need scan, then the proxies to pass over (exclude)
_ACQUIRE = (
    _LIB
    + _LEASES
    + """
local a = ARGV
local got = take(a[1], a[2], KEYS[1], KEYS[2], KEYS[3], KEYS[4], now_ms(), tonumber(a[3]), a[4],
                 a[5], rule_from(a, 6), set_of(a, 11))
if not got then return redis.call('ZCARD', KEYS[2]) end
return got
"""
)

# KEYS: chan lease held. ARGV: prefix proxy token latency ok greedy_ms initial_score
_RELEASE = (
    _LIB
    + _LEASES
    + """
local a = ARGV
return give_back(a[1], KEYS[1], KEYS[2], KEYS[3], a[2], a[3], tonumber(a[4]), a[5],
                 tonumber(a[6]), a[7])
"""
)

# Keep a lease and renew it: the greedy strategy's "same proxy for the next request". Records
# the success (latency >= 0) as release() would, then drops the proxy from the channel instead
# when it no longer fits the rule that admitted it. 1 when the token still holds it, else 0.
# KEYS: lease held. ARGV: prefix channel proxy token lease_ms latency initial_score, the rule (5)
_KEEP = (
    _LIB
    + _LEASES
    + """
local a = ARGV
local prefix, channel, p = a[1], a[2], a[3]
local h = redis.call('HGET', KEYS[2], p)
if not h or split_held(h) ~= a[4] then return 0 end
if not redis.call('ZSCORE', prefix .. 'global', p) then return 0 end
local now, latency = now_ms(), tonumber(a[6])
if latency >= 0 then record_ok(prefix, p, latency, a[7]) end
if not fits(prefix, channel, p, now, rule_from(a, 8)) then
  redis.call('HDEL', KEYS[2], p)
  redis.call('ZREM', KEYS[1], p)
  redis.call('HDEL', prefix .. 'tier:' .. channel, p)
  redis.call('HINCRBY', prefix .. 'stats', 'evicted', 1)
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(a[5]), p)
redis.call('HINCRBY', prefix .. 'stats', 'kept', 1)
return 1
"""
)

# KEYS: chan lease held banned. ARGV: prefix proxy token reason ban_ms channel initial_score
_FAIL = (
    _LIB
    + """
local prefix, p, reason = ARGV[1], ARGV[2], ARGV[4]
local chan, lease, held, banned = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now = now_ms()
local h = redis.call('HGET', held, p)
local base, strategy = nil, nil
if h then
  local token, b, s = split_held(h)
  if token == ARGV[3] then
    base, strategy = b, s
    redis.call('HDEL', held, p)
    redis.call('ZREM', lease, p)
  end
end
redis.call('HINCRBY', prefix .. 'err', p, 1)
redis.call('HINCRBY', prefix .. 'stats', 'fail:' .. reason, 1)
if not redis.call('ZSCORE', prefix .. 'global', p) then return 'gone' end
local function drop(why)
  remove_all(prefix, p)
  local entry = p .. '|' .. why .. ' (channel ' .. ARGV[6] .. ')|' .. now
  redis.call('RPUSH', prefix .. 'dropped', entry)
  redis.call('LTRIM', prefix .. 'dropped', -10000, -1)
  return 'removed'
end
if reason == 'refused' then return drop('connection refused') end
if reason == 'ban' then
  redis.call('ZREM', chan, p)
  redis.call('HDEL', prefix .. 'tier:' .. ARGV[6], p)
  redis.call('ZADD', banned, now + tonumber(ARGV[5]), p)
  return 'banned'
end
local score = tonumber(redis.call('ZSCORE', prefix .. 'score', p) or ARGV[7]) - 1
if score <= 0 then return drop(reason .. ', score 0') end
redis.call('ZADD', prefix .. 'score', score, p)
if base then put_back(chan, p, base, strategy, false) end
return 'kept'
"""
)

# ARGV: prefix proxy
_REMOVE = (
    _LIB
    + """
local existed = redis.call('ZSCORE', ARGV[1] .. 'global', ARGV[2])
remove_all(ARGV[1], ARGV[2])
redis.call('SADD', ARGV[1] .. 'blocked', ARGV[2])
return existed and 1 or 0
"""
)

# ARGV: prefix proxy url ok reason latency initial_score admit
# Returns {score, status}: status "pool" (in the pools), "out" (not admitted) or "removed".
_CHECKED = (
    _LIB
    + """
local prefix, p = ARGV[1], ARGV[2]
local in_pool = redis.call('ZSCORE', prefix .. 'global', p) ~= false
local score = tonumber(redis.call('ZSCORE', prefix .. 'score', p) or ARGV[7])
local admit = ARGV[8] == '1' and redis.call('SISMEMBER', prefix .. 'blocked', p) == 0
if ARGV[4] == '1' then
  score = raised(score)
  if in_pool or admit then
    redis.call('DEL', prefix .. 'topup')  -- channels below their size may find it now
    redis.call('ZADD', prefix .. 'global', tonumber(ARGV[6]), p)
    redis.call('ZADD', prefix .. 'score', score, p)
    redis.call('ZADD', prefix .. 'checked', now_ms(), p)
    redis.call('HSET', prefix .. 'url', p, ARGV[3])
    return {tostring(score), 'pool'}
  end
  return {tostring(score), 'out'}
end
if ARGV[5] == 'refused' then
  remove_all(prefix, p)
  return {tostring(score), 'removed'}
end
score = score - 1
if score <= 0 then
  remove_all(prefix, p)
  return {'0', 'removed'}
end
if in_pool then redis.call('ZADD', prefix .. 'score', score, p) end
return {tostring(score), in_pool and 'pool' or 'out'}
"""
)

# ARGV: prefix
_REAP_ALL = (
    _LIB
    + """
local n, now = 0, now_ms()
for _, c in ipairs(redis.call('SMEMBERS', ARGV[1] .. 'channels')) do
  n = n + reap(ARGV[1], c, now, 1000)
end
return n
"""
)

# Drain the per-proxy success/failure counters and the log of proxies the pool dropped.
_DRAIN = """
local ok = redis.call('HGETALL', KEYS[1])
local err = redis.call('HGETALL', KEYS[2])
local dropped = redis.call('LRANGE', KEYS[3], 0, -1)
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return {ok, err, dropped}
"""

_scripts: dict[str, redis.commands.core.Script] = {}
_client: redis.Redis | None = None


def _redis() -> redis.Redis:
    """get_redis(), kept: building a Redis() costs ~70 us, a third of an acquire. A new one is
    made when the shared connection pool changes (reset_pools after a fork, another REDIS_URL)."""
    global _client
    shared = connections._pools.get(settings.REDIS_URL)
    if _client is None or shared is None or _client.connection_pool is not shared:
        _client = get_redis()
    return _client


def _script(name: str, source: str):
    script = _scripts.get(name)
    if script is None:
        script = _scripts[name] = _redis().register_script(source)
    return script


def _settings() -> tuple:
    return (
        float(settings.PROXY_MIN_SCORE),
        int(settings.PROXY_MAX_AGE * 1000),
        int(settings.PROXY_MAX_LATENCY_MS),
        int(settings.PROXY_CHANNEL_SIZE),
    )


def _rule() -> list:
    """The selection rule as the scripts take it: min_score max_age_ms max_latency need scan."""
    min_score, max_age_ms, max_latency, need = _settings()
    return [min_score, max_age_ms, max_latency, need, max(need * 20, 1000)]


def _acquire_args(channel: str, lease_seconds: float, strategy: str, token: str) -> list:
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    return [PREFIX, channel, int(lease_seconds * 1000), strategy, token, *_rule()]


def _release_args(lease: Lease, latency_ms: float, ok: bool, record: bool = True) -> list:
    outcome = ("1" if record else "2") if ok else "0"
    return [lease.proxy, lease.token, int(latency_ms), outcome, int(settings.PROXY_GREEDY_MS),
            INITIAL_SCORE]  # fmt: skip


def acquire(
    *, channel: str, lease_seconds: float = 60, strategy: str = "least_used",
    exclude: Collection[str] = (),
) -> Lease | None:  # fmt: skip
    """Take a proxy from the channel's pool for `lease_seconds`, or None when there is none.

    No two holders get one proxy in a channel; an expired lease returns the proxy to the pool.
    Proxies in `exclude` (already tried for this request) are given only when no other is free.
    """
    return acquire_or_count(
        channel=channel, lease_seconds=lease_seconds, strategy=strategy, exclude=exclude
    )[0]


def acquire_or_count(
    *, channel: str, lease_seconds: float = 60, strategy: str = "least_used",
    exclude: Collection[str] = (),
) -> tuple[Lease | None, int]:  # fmt: skip
    """acquire(), and when it found none, how many of the channel's proxies other holders
    have leased at that moment (0 with a lease). Counted in the same script, so a caller
    deciding whether to wait for a proxy to come back never misses a release in between."""
    token = secrets.token_hex(8)
    args = [*_acquire_args(channel, lease_seconds, strategy, token), *exclude]
    found = _script("acquire", _ACQUIRE)(keys=_chan(channel), args=args, client=_redis())
    if isinstance(found, int):
        return None, found
    lease = Lease(proxy=found[0].decode(), url=found[1].decode(), channel=channel, token=token)
    return lease, 0


def release(*, lease: Lease, latency_ms: float, ok: bool = True, record: bool = True) -> None:
    """Return a leased proxy with its outcome: one more use on the channel, its latency and a
    score step on the global pool when ok. A late release (lease expired or proxy removed) is a
    no-op. record=False: the outcome was recorded already (by keep()); only give it back."""
    _script("release", _RELEASE)(
        keys=_chan(lease.channel)[:3],
        args=[PREFIX, *_release_args(lease, latency_ms, ok, record)],
        client=_redis(),
    )


def keep(*, lease: Lease, latency_ms: float | None, lease_seconds: float) -> bool:
    """Go on holding a leased proxy for another `lease_seconds` (the greedy strategy's next
    request), recording the success of `latency_ms` as release() would (None: renew only).

    False when the lease is no longer this holder's (expired, proxy removed), or when the proxy
    no longer fits the selection rule that brought it into the channel: it then leaves the
    channel, and the caller acquires another.
    """
    found = _script("keep", _KEEP)(
        keys=_chan(lease.channel)[1:3],
        args=[PREFIX, lease.channel, lease.proxy, lease.token, int(lease_seconds * 1000),
              -1 if latency_ms is None else int(latency_ms), INITIAL_SCORE, *_rule()],
        client=_redis(),
    )  # fmt: skip
    return found == 1


def fail(*, lease: Lease, reason: str) -> str:
    """Report a proxy failure. "timeout"/"error" cost 1 point (0 removes it), "refused"
    removes it from every pool, "ban" drops it from this channel only for PROXY_BAN_SECONDS.

    Returns what happened: "kept", "banned", "removed" or "gone" (it was already removed).
    """
    if reason not in REASONS:
        raise ValueError(f"reason must be one of {REASONS}, got {reason!r}")
    result = _script("fail", _FAIL)(
        keys=_chan(lease.channel),
        args=[PREFIX, lease.proxy, lease.token, reason, int(settings.PROXY_BAN_SECONDS * 1000),
              lease.channel, INITIAL_SCORE],
        client=_redis(),
    )  # fmt: skip
    return result.decode()


def remove(*, proxy: str) -> None:
    """Take a proxy out of the global pool and every channel pool at once, and keep it out
    until allow(): no late release or validation in flight brings it back."""
    remove_many(proxies=[proxy])


def remove_many(*, proxies: list[str]) -> None:
    """remove() for each proxy, in one round trip (each proxy still atomically)."""
    if not proxies:
        return
    script = _script("remove", _REMOVE)
    with _redis().pipeline(transaction=False) as pipe:
        for proxy in proxies:
            script(keys=[], args=[PREFIX, proxy], client=pipe)
        pipe.execute()


def allow(*, proxy: str) -> None:
    """Let a removed or disabled proxy be admitted again by its next successful validation."""
    get_redis().srem(BLOCKED, proxy)


def record_check(
    *, proxy: str, url: str, ok: bool, reason: str = "", latency_ms: float = 0,
    initial_score: float = INITIAL_SCORE, admit: bool = True,
) -> tuple[float, str]:  # fmt: skip
    """Apply one validation outcome atomically. A success raises the score, records latency and
    the validation time, and (when `admit`) puts a proxy that is not yet pooled in the global
    pool. A refused connection or a score of 0 removes it.

    Returns (new score, status) with status "pool", "out" or "removed".
    """
    score, status = _script("checked", _CHECKED)(
        keys=[],
        args=[PREFIX, proxy, url, "1" if ok else "0", reason, int(latency_ms), initial_score,
              "1" if admit else "0"],
        client=_redis(),
    )  # fmt: skip
    return float(score), status.decode()


def reap() -> int:
    """Return every channel's expired leases to their pools; the number returned."""
    return _script("reap", _REAP_ALL)(keys=[], args=[PREFIX], client=_redis())


def should_keep(*, latency_ms: float) -> bool:
    """Greedy strategy: keep using a proxy while it answers faster than PROXY_GREEDY_MS."""
    return latency_ms < settings.PROXY_GREEDY_MS


@dataclass(frozen=True)
class Drained:
    successes: dict[str, int]
    failures: dict[str, int]
    dropped: list[tuple[str, str, float]]  # proxy, why, unix time


def drain() -> Drained:
    """Take (and reset) the counters and the drop log that releases and failures left."""
    ok, err, dropped = _script("drain", _DRAIN)(keys=[OKS, ERRS, DROPPED], client=_redis())

    def pairs(flat: list) -> dict[str, int]:
        return {flat[i].decode(): int(flat[i + 1]) for i in range(0, len(flat), 2)}

    entries = []
    for raw in dropped:
        proxy, why, at = raw.decode().split("|")
        entries.append((proxy, why, int(at) / 1000))
    return Drained(successes=pairs(ok), failures=pairs(err), dropped=entries)


def members() -> dict[str, dict]:
    """Every pooled proxy with its latency, score and last validation (unix seconds)."""
    client = _redis()
    with client.pipeline(transaction=True) as pipe:
        pipe.zrange(GLOBAL, 0, -1, withscores=True)
        pipe.zrange(SCORE, 0, -1, withscores=True)
        pipe.zrange(CHECKED, 0, -1, withscores=True)
        latencies, scores, checked = pipe.execute()
    scores_by = {p.decode(): s for p, s in scores}
    checked_by = {p.decode(): c / 1000 for p, c in checked}
    return {
        p.decode(): {
            "latency_ms": latency,
            "score": scores_by.get(p.decode(), INITIAL_SCORE),
            "checked_at": checked_by.get(p.decode()),
        }
        for p, latency in latencies
    }


def channels() -> list[str]:
    return sorted(c.decode() for c in get_redis().smembers(CHANNELS))


def channel_members(*, channel: str) -> dict[str, set[str]]:
    """Per channel: proxies free to take, leased and banned (bans still running)."""
    client = _redis()
    chan, lease, _, banned = _chan(channel)
    now_ms = time.time() * 1000
    with client.pipeline(transaction=True) as pipe:
        pipe.zrange(chan, 0, -1)
        pipe.zrange(lease, 0, -1)
        pipe.zrangebyscore(banned, now_ms, "+inf")
        free, leased, bans = pipe.execute()
    return {
        "free": {p.decode() for p in free},
        "leased": {p.decode() for p in leased},
        "banned": {p.decode() for p in bans},
    }


def proxy_channels(*, proxy: str) -> dict[str, dict]:
    """Where one proxy stands in each channel: uses or position, leased, banned until."""
    client = _redis()
    names = channels()
    with client.pipeline(transaction=False) as pipe:
        for name in names:
            chan, lease, _, banned = _chan(name)
            pipe.zscore(chan, proxy)
            pipe.zscore(lease, proxy)
            pipe.zscore(banned, proxy)
        values = pipe.execute()
    out = {}
    for i, name in enumerate(names):
        in_chan, lease_until, banned_until = values[i * 3 : i * 3 + 3]
        if in_chan is None and lease_until is None and banned_until is None:
            continue
        out[name] = {
            "position": in_chan,
            "leased_until": lease_until / 1000 if lease_until else None,
            "banned_until": banned_until / 1000 if banned_until else None,
        }
    return out


def health() -> dict:
    """Pool health for pages and /ws/proxies/: sizes, how many pass the strict selection rule,
    each channel's free/leased/banned counts, and counters (acquired, relaxed, failures...)."""
    now = time.time()
    pooled = members()
    min_score, max_age_ms, max_latency, need = _settings()
    strict = sum(
        1
        for m in pooled.values()
        if m["score"] > min_score
        and m["checked_at"] is not None
        and m["checked_at"] >= now - max_age_ms / 1000
        and m["latency_ms"] <= max_latency
    )
    latencies = sorted(m["latency_ms"] for m in pooled.values())
    checked = [m["checked_at"] for m in pooled.values() if m["checked_at"] is not None]
    stats = {k.decode(): int(v) for k, v in get_redis().hgetall(STATS).items()}
    per_channel = {}
    for name in channels():
        sets = channel_members(channel=name)
        per_channel[name] = {
            "free": len(sets["free"]),
            "leased": len(sets["leased"]),
            "banned": len(sets["banned"]),
            "relaxed": stats.get(f"relaxed:{name}", 0),
        }
    return {
        "pooled": len(pooled),
        "selectable": strict,
        "channel_size": need,
        "median_latency_ms": latencies[len(latencies) // 2] if latencies else None,
        "score_histogram": score_histogram(m["score"] for m in pooled.values()),
        "last_validated_age_s": round(now - max(checked), 1) if checked else None,
        "channels": per_channel,
        "counters": {k: v for k, v in stats.items() if not k.startswith("relaxed:")},
        "validating": bool(get_redis().exists(LOCK)),
    }


def publish_slot(ms: int) -> bool:
    """True for the one caller, across processes, that may publish a health snapshot now."""
    return bool(_redis().set(PUBLISH, "1", nx=True, px=max(1, ms)))


# Score bins of the health histogram: [low, high) each, the last one open.
SCORE_BINS = (0, 2, 4, 6, 8, 10, 15, 20)


def score_histogram(scores) -> list[list]:
    """[[label, count], ...] over SCORE_BINS, e.g. ["6-8", 3] and ["20+", 1]."""
    counts = [0] * len(SCORE_BINS)
    for score in scores:
        i = max(n for n, low in enumerate(SCORE_BINS) if score >= low or n == 0)
        counts[i] += 1
    labels = [f"{low}-{high}" for low, high in zip(SCORE_BINS, SCORE_BINS[1:], strict=False)]
    return [[label, n] for label, n in zip([*labels, f"{SCORE_BINS[-1]}+"], counts, strict=True)]


@contextlib.contextmanager
def validation_lock(
    *, timeout: float, blocking_timeout: float = 0
) -> Iterator[redis.lock.Lock | None]:
    """One validation pass at a time across every machine. Yields the lock (call reacquire()
    to extend it batch by batch) or None when another pass holds it."""
    lock = get_redis().lock(LOCK, timeout=timeout, blocking_timeout=blocking_timeout)
    acquired = lock.acquire(blocking=blocking_timeout > 0)
    try:
        yield lock if acquired else None
    finally:
        if acquired:
            with contextlib.suppress(redis.exceptions.LockError):
                lock.release()
