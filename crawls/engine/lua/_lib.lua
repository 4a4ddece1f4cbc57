-- Shared by every frontier script: crawls/engine/frontier.py prepends this file to each one,
-- after a header that binds KEYS to the names used here (K_QUEUE, K_STATS...), generated from
-- the table of a crawl's keys in crawls/engine/keys.py: a key is named there, not here. KEYS is
-- always the crawl's fixed keys in the table's order; only the overflow's scripts (and cancel)
-- get K_SPILLING and K_UNSPILLED. Seen buckets are built from a prefix argument. All keys share
-- the crawl's hash tag, so they live on one slot.

-- Queue score = (-priority) * 2^44 + depth * 2^32 + seq. Every term stays below 2^53, so the
-- double holds it exactly; priority is clamped to +-255, depth to 4095, seq wraps at 2^32.
-- seq is the request's turn among its host's requests (K_HOSTSEQ): at one priority and depth,
-- hosts take turns (each host's first request, then each one's second...), so that the window
-- a claim looks at holds many hosts, not the many pages of a few; ties between hosts break on
-- the packed request (its fingerprint, first).
local PRIORITY_UNIT = 17592186044416

-- What a script saw happen to a host that the crawl's log tells (crawls/engine/crawl_log.py):
-- flat triples of kind, host, text, returned by the scripts that record them (complete, claim).
local EVENTS = {}
local function event(kind, host, text)
  EVENTS[#EVENTS + 1] = kind
  EVENTS[#EVENTS + 1] = host
  EVENTS[#EVENTS + 1] = text
end
local DEPTH_UNIT = 4294967296

-- Milliseconds from the server's clock, so that every worker agrees on "now".
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function clamp(x, lo, hi)
  if x < lo then return lo end
  if x > hi then return hi end
  return x
end

-- '%.0f' keeps every digit: Lua's default number format would round to 14 significant digits.
local function score(priority, depth, seq)
  local p = clamp(priority or 0, -255, 255)
  local d = clamp(depth or 0, 0, 4095)
  return string.format('%.0f', -p * PRIORITY_UNIT + d * DEPTH_UNIT + seq % DEPTH_UNIT)
end

-- A queued request is packed (crawls/engine/request.py, "Packed requests"): six fields and a
-- line break between each, fp, host, url, depth, priority, referrer, then a JSON object of
-- the rest when there is any. A queue written before packing holds JSON objects ('{' first):
-- each reader here takes both.
local PACKED = '^([^\n]*)\n([^\n]*)\n([^\n]*)\n([^\n]*)\n([^\n]*)\n'

local function is_json(member)
  return string.byte(member, 1) == 123
end

-- The host of a request without decoding it all: its own field, or when that is empty what
-- stands between the URL's "://" and the "/" after it (Request.pack leaves it out then).
local function host_of(member)
  if is_json(member) then
    return string.match(member, '"h":"([^"]*)"') or cjson.decode(member).h or ''
  end
  local host, url = string.match(member, '^[^\n]*\n([^\n]*)\n([^\n]*)')
  if host == '/' then return '' end  -- none: a host never holds a '/'
  if host ~= '' then return host end
  return string.match(url, '^.-://([^/]*)/') or ''
end

-- The priority and depth of a request.
local function rank_of(member)
  if is_json(member) then
    local req = cjson.decode(member)
    return req.p, req.d
  end
  local _, _, _, depth, priority = string.match(member, PACKED)
  return tonumber(priority), tonumber(depth)
end

-- Queue `member` (a packed request) behind its host's peers of equal priority and depth. `req`
-- may carry the already known priority (p), depth (d) and host (h); otherwise they are read
-- from the member.
local function enqueue(member, req)
  local priority, depth
  if req then priority, depth = req.p, req.d else priority, depth = rank_of(member) end
  local host = (req and req.h) or host_of(member)
  local seq = redis.call('HINCRBY', K_HOSTSEQ, host, 1)
  local added = redis.call('ZADD', K_QUEUE, 'NX', score(priority, depth, seq), member)
  if added == 1 then redis.call('HINCRBY', K_HOSTQ, host, 1) end
  return added
end

-- The fingerprint of a request: its first field.
local function fp_of(member)
  if is_json(member) then
    return string.match(member, '^{"f":"(-?%d+)"') or cjson.decode(member).f
  end
  return string.match(member, '^([^\n]*)')
end

-- A host's own delay in ms: its robots.txt Crawl-delay, else the crawl's (`default`).
local function base_delay(host, default)
  return tonumber(redis.call('HGET', K_HOSTDELAY, host)) or default
end

-- The delay a host gets now: its own, or longer while it pushes back (429, 503).
local function host_delay(host, default)
  local delay = base_delay(host, default)
  local slowed = tonumber(redis.call('HGET', K_HOSTSLOW, host))
  if slowed and slowed > delay then return slowed end
  return delay
end

-- A host with a delay is reserved by the one request claimed for it until the host answered it
-- (answered.lua); one that goes back or ends unsent frees it, its next allowed time untouched.
local function unreserve(host, fp)
  if redis.call('HGET', K_HOSTCLAIM, host) == fp then redis.call('HDEL', K_HOSTCLAIM, host) end
end

-- A claimed request counts in its host's requests in flight (the per-host cap, the host view)
-- from the claim until the host answered it, or it went back or ended unsent.
local function took_off(host, fp)
  redis.call('HSET', K_FLYING, fp, host)
  redis.call('HINCRBY', K_HOSTFLIGHT, host, 1)
end

local function landed(fp)
  local host = redis.call('HGET', K_FLYING, fp)
  if not host then return end
  redis.call('HDEL', K_FLYING, fp)
  if redis.call('HINCRBY', K_HOSTFLIGHT, host, -1) <= 0 then
    redis.call('HDEL', K_HOSTFLIGHT, host)
  end
end

-- A request left the queue (claimed): one fewer queued for its host; a host at 0 is dropped so
-- the hash holds only hosts with work (and heals if it ever lagged behind the queue).
local function dequeued(host)
  if redis.call('HINCRBY', K_HOSTQ, host, -1) <= 0 then redis.call('HDEL', K_HOSTQ, host) end
end

-- One more crash ("x") in a request. In a packed one "x" is a key of its JSON object (the
-- seventh field), made when there is none. In a JSON one, inside a JSON string a quote is
-- escaped, so ',"x":' can only be the key; to_json wrote it after every other key but "e",
-- which comes with an "x", so a new "x" goes at the end.
local function crashed(member)
  if not is_json(member) then
    local head, extra = string.match(member, '^([^\n]*\n[^\n]*\n[^\n]*\n[^\n]*\n[^\n]*\n[^\n]*)\n(.*)$')
    if not head then return member .. '\n{"x":1}' end
    local data = cjson.decode(extra)
    data.x = (tonumber(data.x) or 0) + 1
    return head .. '\n' .. cjson.encode(data)
  end
  local n = string.match(member, ',"x":(%d+)')
  if n then
    return (string.gsub(member, ',"x":%d+', ',"x":' .. (tonumber(n) + 1), 1))
  end
  return string.sub(member, 1, -2) .. ',"x":1}'
end

-- A claimed request goes back to the queue: handed back unfetched (release), or, with one
-- more crash, because its lease ran out (the slice holding it ended without finishing it).
local function unclaim(fp, crash)
  local member = redis.call('HGET', K_BACKUP, fp)
  if not member then
    redis.call('ZREM', K_LEASES, fp)
    return 0
  end
  redis.call('HDEL', K_BACKUP, fp)
  redis.call('ZREM', K_LEASES, fp)
  unreserve(host_of(member), fp)
  landed(fp)
  if crash then member = crashed(member) end
  enqueue(member)
  return 1
end

-- Counter deltas are gathered in a table and written once per name with HINCRBY.
local function bump(counts, name, by)
  counts[name] = (counts[name] or 0) + (by or 1)
end

local function flush(counts)
  for name, by in pairs(counts) do
    if by ~= 0 then redis.call('HINCRBY', K_STATS, name, by) end
  end
end

-- Limits for admitting new URLs. max_pages <= 0 and max_depth < 0 (or unset) mean no limit.
local function read_limits()
  local cfg = redis.call('HMGET', K_CONFIG, 'max_pages', 'max_depth')
  return {
    max_pages = tonumber(cfg[1]) or 0,
    max_depth = tonumber(cfg[2]) or -1,
    requests = tonumber(redis.call('HGET', K_STATS, 'requests')) or 0,
  }
end

-- Test-and-add one fingerprint, then queue the request if it is new and under max_pages.
-- A URL refused for max_pages is not marked seen, so raising the cap later can admit it.
local function admit(limits, counts, seen_key, fp, member, req)
  if limits.max_pages > 0 and limits.requests >= limits.max_pages then
    if redis.call('SISMEMBER', seen_key, fp) == 1 then
      bump(counts, 'repeats')
    else
      bump(counts, 'dropped')
    end
    return 0
  end
  if redis.call('SADD', seen_key, fp) == 0 then
    bump(counts, 'repeats')
    return 0
  end
  limits.requests = limits.requests + 1
  bump(counts, 'requests')
  enqueue(member, req)
  return 1
end

-- Push-back (429, 503): a host's delay at least doubles, to no less than SLOWED_MIN_MS and
-- no more than SLOWED_MAX_MS. It eases back by a quarter of the extra delay per answer that is
-- not a push-back, at most once per current delay (answers to requests already on their way
-- when the push-back came do not count), and within EASED_MS of its own delay the host is back
-- to normal. K_HOSTWHY keeps "<ms of the last change> <why>".
local SLOWED_MIN_MS, SLOWED_MAX_MS, EASED_MS = 1000, 60000, 50

local function slowed_since(host)
  local why = redis.call('HGET', K_HOSTWHY, host) or ''
  local ms, text = string.match(why, '^(%d+) (.*)$')
  return tonumber(ms) or 0, text or ''
end

local function recover(host, default, now)
  local slowed = tonumber(redis.call('HGET', K_HOSTSLOW, host))
  if not slowed then return end
  local since, why = slowed_since(host)
  if now - since < slowed then return end
  local base = base_delay(host, default)
  local eased = base + math.floor((slowed - base) * 3 / 4)
  if eased - base < EASED_MS then
    redis.call('HDEL', K_HOSTSLOW, host)
    redis.call('HDEL', K_HOSTWHY, host)
    event('eased', host, why)
  else
    redis.call('HSET', K_HOSTSLOW, host, eased)
    redis.call('HSET', K_HOSTWHY, host, now .. ' ' .. why)
  end
end

-- Parking: a host none of whose requests got an answer for park_after_ms, and at least
-- PARK_MIN_FAILS of them, is held for park_ms (K_HOSTHELD) with the reason in K_HOSTPARKED.
-- K_HOSTFAIL keeps "<ms of the first failure in a row> <failures in a row>"; an answer ends it.
local PARK_MIN_FAILS = 5

local function count_failures(host, answered, failed, now)
  if answered > 0 then
    redis.call('HDEL', K_HOSTFAIL, host)
    return
  end
  local since, count = string.match(redis.call('HGET', K_HOSTFAIL, host) or '', '^(%d+) (%d+)$')
  since, count = tonumber(since) or now, (tonumber(count) or 0) + failed
  local cfg = redis.call('HMGET', K_CONFIG, 'park_after_ms', 'park_ms')
  local after, park = tonumber(cfg[1]) or 0, tonumber(cfg[2]) or 0
  if after > 0 and count >= PARK_MIN_FAILS and now - since >= after then
    redis.call('HSET', K_HOSTHELD, host, now + park)
    local why = string.format('parked: none of its last %d requests got an answer in %d s',
      count, math.floor((now - since) / 1000))
    redis.call('HSET', K_HOSTPARKED, host, why)
    event('parked', host, why .. string.format('; held for %d s', math.floor(park / 1000)))
    redis.call('HDEL', K_HOSTFAIL, host)
  else
    redis.call('HSET', K_HOSTFAIL, host, since .. ' ' .. count)
  end
end

-- The overflow (crawls/engine/overflow.py): one holder at a time changes it, under a lock in
-- the database; each took a token (K_CONFIG overflow_token) when it got the lock, and a write
-- made with an older one (a holder that lost its lock, and goes on unaware) is refused.
local function overflow_holder(token)
  return redis.call('HGET', K_CONFIG, 'overflow_token') == token
end

-- Requests waiting to be written to the database, or rows to be removed from it: a step cut
-- short that the next holder finishes before it starts anything new.
local function overflow_staged()
  return redis.call('EXISTS', K_SPILLING) == 1 or redis.call('EXISTS', K_UNSPILLED) == 1
end
