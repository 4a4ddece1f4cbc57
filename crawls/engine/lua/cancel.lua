-- Stop for good: drop every unfinished request and count them in 'cancelled', so that
-- requests == responses + errors + queued + delayed + in_flight + cancelled + spilled still
-- holds. What waits in the database ('spilled') is cancelled too; its rows are purged after
-- (crawls/engine/overflow.py). Seen fingerprints and counters stay. Returns how many
-- requests were dropped.
redis.call('SET', K_STATE, 'cancelled')
local spilled = tonumber(redis.call('HGET', K_STATS, 'spilled')) or 0
local dropped = redis.call('ZCARD', K_QUEUE) + redis.call('ZCARD', K_DELAYED)
  + redis.call('HLEN', K_BACKUP) + spilled
redis.call('DEL', K_QUEUE, K_DELAYED, K_BACKUP, K_LEASES, K_HOSTQ, K_HOSTCLAIM,
  K_FLYING, K_HOSTFLIGHT, K_SPILLING)
if spilled ~= 0 then redis.call('HINCRBY', K_STATS, 'spilled', -spilled) end
if dropped > 0 then redis.call('HINCRBY', K_STATS, 'cancelled', dropped) end
return dropped
