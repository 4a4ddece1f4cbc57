-- Claim up to ARGV[1] requests with a lease of ARGV[2] ms, scanning at most ARGV[3] queue
-- entries when a host delay applies, and taking a host whose next allowed time is at most
-- ARGV[4] ms away (0: none that is not due). Returns {the claimed packed requests in queue
-- order, the ms each is to wait before its host's time, what the crawl's log tells (EVENTS in
-- _lib.lua: hosts whose hold or parking ran out), the crawl's scope generation}: a
-- worker that claims a host's next turn a little ahead and waits for it asks the host on time,
-- instead of up to a claim interval late every turn (send.lua still checks the time when it
-- is sent). The scope generation counts the changes of the crawl's include and exclude
-- patterns while it runs: read with the claim, at once, a slice sorts what it claims by the
-- scope as it is now (crawls/engine/scope_changes.py). Then the queue's size and 'spilled'.
if redis.call('GET', K_STATE) ~= 'running' then return {{}, {}, {}} end
local n, lease_ms, scan = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local ahead = tonumber(ARGV[4]) or 0
local now = now_ms()

-- Retries whose time has come rejoin the queue first (bounded, the rest come next call).
local due = redis.call('ZRANGEBYSCORE', K_DELAYED, '-inf', now, 'LIMIT', 0, scan)
for _, member in ipairs(due) do
  redis.call('ZREM', K_DELAYED, member)
  enqueue(member)
end

-- No delay and no cap anywhere: plain pops.
local function pop_fast()
  local popped = redis.call('ZPOPMIN', K_QUEUE, n)
  local members, waits = {}, {}
  for i = 1, #popped, 2 do
    members[#members + 1] = popped[i]
    waits[#waits + 1] = 0
    dequeued(host_of(popped[i]))
  end
  return members, waits
end

-- A host with a delay gives one request at a time: it is ready once its next-allowed time has
-- passed and no request claimed for it is still unanswered (K_HOSTCLAIM). The claimed request
-- reserves the host; its next-allowed time is set when it is sent (send.lua) and again when the
-- host answers (answered.lua), so the delay runs from the moment the host was asked, however
-- long the request waited in the worker or took to arrive. With a cap, a host gives requests
-- while fewer than `cap` of its requests are in flight (K_HOSTFLIGHT). A host an operator
-- holds (K_HOSTHELD) gives nothing until then. A host due within `ahead` ms counts as ready; its
-- request waits the rest (`waits`).
-- Skipped requests keep their place. Only the first `scan` entries are looked at, so a
-- one-host crawl with a delay costs O(n) per call, not O(queue).
local function pop_polite(default_delay, cap)
  local window = redis.call('ZRANGE', K_QUEUE, 0, scan - 1)
  local delays, room, due, members, waits = {}, {}, {}, {}, {}
  for _, member in ipairs(window) do
    local host = host_of(member)
    if delays[host] == nil then
      delays[host] = host_delay(host, default_delay)
      due[host] = 0
      if delays[host] > 0 then
        due[host] = math.max(0, (tonumber(redis.call('HGET', K_HOSTS, host)) or 0) - now)
      end
      local held = tonumber(redis.call('HGET', K_HOSTHELD, host))
      if held and held <= now then
        -- A hold (an operator's, or a parking) that ran out: the log says the host is free.
        redis.call('HDEL', K_HOSTHELD, host)
        local parked = redis.call('HGET', K_HOSTPARKED, host)
        redis.call('HDEL', K_HOSTPARKED, host)
        event('released', host, parked and 'its parking ended' or 'its hold ended')
        held = nil
      end
      local ready = not held and (
        delays[host] <= 0 or (
          redis.call('HEXISTS', K_HOSTCLAIM, host) == 0 and due[host] <= ahead))
      room[host] = 0
      if ready then
        room[host] = delays[host] > 0 and 1 or n
        if cap > 0 then
          local flying = tonumber(redis.call('HGET', K_HOSTFLIGHT, host)) or 0
          room[host] = math.min(room[host], cap - flying)
        end
      end
    end
    if room[host] > 0 then
      members[#members + 1] = member
      waits[#waits + 1] = due[host]
      redis.call('ZREM', K_QUEUE, member)
      dequeued(host)
      room[host] = room[host] - 1
      if delays[host] > 0 then redis.call('HSET', K_HOSTCLAIM, host, fp_of(member)) end
      if #members >= n then break end
    end
  end
  return members, waits
end

local config = redis.call('HMGET', K_CONFIG, 'host_delay_ms', 'host_concurrency', 'scope_gen')
local default_delay, cap = tonumber(config[1]) or 0, tonumber(config[2]) or 0
local members, waits
if default_delay <= 0 and cap <= 0 and redis.call('HLEN', K_HOSTDELAY) == 0
  and redis.call('HLEN', K_HOSTSLOW) == 0 and redis.call('HLEN', K_HOSTHELD) == 0 then
  members, waits = pop_fast()
else
  members, waits = pop_polite(default_delay, cap)
end

local deadline = now + lease_ms
for _, member in ipairs(members) do
  local fp = fp_of(member)
  redis.call('HSET', K_BACKUP, fp, member)
  redis.call('ZADD', K_LEASES, deadline, fp)
  took_off(host_of(member), fp)
end
-- What is left queued, and what waits in the database: the slice spills or refills the
-- window (crawls/engine/overflow.py) by these, with no round trip of its own.
local spilled = tonumber(redis.call('HGET', K_STATS, 'spilled')) or 0
return {members, waits, EVENTS, tonumber(config[3]) or 0, redis.call('ZCARD', K_QUEUE), spilled}
