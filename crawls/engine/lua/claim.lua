-- Claim up to ARGV[1] requests with a lease of ARGV[2] ms, scanning at most ARGV[3] queue
-- entries when a host delay applies. Returns the claimed request JSONs in queue order.
if redis.call('GET', K_STATE) ~= 'running' then return {} end
local n, lease_ms, scan = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms()

-- Retries whose time has come rejoin the queue first (bounded, the rest come next call).
local due = redis.call('ZRANGEBYSCORE', K_DELAYED, '-inf', now, 'LIMIT', 0, scan)
for _, member in ipairs(due) do
  redis.call('ZREM', K_DELAYED, member)
  enqueue(member)
end

-- No delay anywhere: plain pops, no per-host bookkeeping.
local function pop_fast()
  local popped = redis.call('ZPOPMIN', K_QUEUE, n)
  local members = {}
  for i = 1, #popped, 2 do
    members[#members + 1] = popped[i]
    dequeued(host_of(popped[i]))
  end
  return members
end

-- A host with a delay gives one request at a time: it is ready once its next-allowed time has
-- passed and no request claimed for it is still unanswered (K_HOSTCLAIM). The claimed request
-- reserves the host; its next-allowed time is set when it is sent (send.lua) and again when the
-- host answers (answered.lua), so the delay runs from the moment the host was asked, however
-- long the request waited in the worker or took to arrive.
-- Skipped requests keep their place. Only the first `scan` entries are looked at, so a
-- one-host crawl with a delay costs O(n) per call, not O(queue).
local function pop_polite(default_delay)
  local window = redis.call('ZRANGE', K_QUEUE, 0, scan - 1)
  local delays, ready, members = {}, {}, {}
  for _, member in ipairs(window) do
    local host = host_of(member)
    if delays[host] == nil then
      delays[host] = host_delay(host, default_delay)
      ready[host] = delays[host] <= 0 or (
        redis.call('HEXISTS', K_HOSTCLAIM, host) == 0
        and (tonumber(redis.call('HGET', K_HOSTS, host)) or 0) <= now)
    end
    if ready[host] then
      members[#members + 1] = member
      redis.call('ZREM', K_QUEUE, member)
      dequeued(host)
      if delays[host] > 0 then
        ready[host] = false
        redis.call('HSET', K_HOSTCLAIM, host, fp_of(member))
      end
      if #members >= n then break end
    end
  end
  return members
end

local default_delay = tonumber(redis.call('HGET', K_CONFIG, 'host_delay_ms')) or 0
local members
if default_delay <= 0 and redis.call('HLEN', K_HOSTDELAY) == 0
  and redis.call('HLEN', K_HOSTSLOW) == 0 then
  members = pop_fast()
else
  members = pop_polite(default_delay)
end

local deadline = now + lease_ms
for _, member in ipairs(members) do
  local fp = fp_of(member)
  redis.call('HSET', K_BACKUP, fp, member)
  redis.call('ZADD', K_LEASES, deadline, fp)
end
return members
