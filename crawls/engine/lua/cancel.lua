-- Stop for good: drop every unfinished request and count them in 'cancelled', so that
-- requests == responses + errors + queued + delayed + in_flight + cancelled still holds.
-- Seen fingerprints and counters stay. Returns how many requests were dropped.
redis.call('SET', K_STATE, 'cancelled')
local dropped = redis.call('ZCARD', K_QUEUE) + redis.call('ZCARD', K_DELAYED)
  + redis.call('HLEN', K_BACKUP)
redis.call('DEL', K_QUEUE, K_DELAYED, K_BACKUP, K_LEASES, K_HOSTQ, K_HOSTCLAIM,
  K_FLYING, K_HOSTFLIGHT)
if dropped > 0 then redis.call('HINCRBY', K_STATS, 'cancelled', dropped) end
return dropped
