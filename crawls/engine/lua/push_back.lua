-- A host pushed back (ARGV: host, Retry-After ms or '', why): its delay is raised, for every
-- worker, and it is asked nothing before now + max(delay, Retry-After). Answers to requests
-- that were already on their way (sent before the first push-back came in) do not raise it
-- again: only a push-back that comes a full delay after the last change doubles it.
-- Returns {the host's delay in ms, 1 if this push-back raised it else 0}.
local host, wait_ms, why = ARGV[1], tonumber(ARGV[2]) or 0, ARGV[3]
local now = now_ms()
local base = base_delay(host, tonumber(redis.call('HGET', K_CONFIG, 'host_delay_ms')) or 0)
local current = math.max(base, tonumber(redis.call('HGET', K_HOSTSLOW, host)) or 0)
local last = slowed_since(host)
local slowed = current
if now - last >= current then slowed = current * 2 end
slowed = math.min(math.max(slowed, SLOWED_MIN_MS, wait_ms), SLOWED_MAX_MS)
redis.call('HSET', K_HOSTSLOW, host, slowed)
redis.call('HSET', K_HOSTWHY, host, now .. ' ' .. why)
local until_ms = now + math.max(slowed, wait_ms)
if until_ms > (tonumber(redis.call('HGET', K_HOSTS, host)) or 0) then
  redis.call('HSET', K_HOSTS, host, until_ms)
end
return {slowed, slowed > current and 1 or 0}
