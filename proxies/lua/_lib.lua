-- Shared by every pool script: proxies/pool.py prepends this file to each one.
-- Keys are built from the prefix argument (ARGV[1], pool.PREFIX) or passed in KEYS; every key
-- shares the {px} hash tag, so a script's keys live on one slot.
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

-- The two halves of a lease (take, give_back) and the selection rule, as functions, so that
-- acquire, release and keep run the very same checks.

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
