-- Drop what a host (ARGV[1]) has waiting: its queued requests and its retries, counted in
-- 'cancelled' so that the counter invariant holds; claimed requests finish. Looks at the whole
-- queue once (an operator's action, not the hot path). Returns how many were dropped.
local host = ARGV[1]
local dropped = 0
for _, key in ipairs({K_QUEUE, K_DELAYED}) do
  local doomed = {}
  for _, member in ipairs(redis.call('ZRANGE', key, 0, -1)) do
    if host_of(member) == host then doomed[#doomed + 1] = member end
  end
  for start = 1, #doomed, 1000 do
    redis.call('ZREM', key, unpack(doomed, start, math.min(start + 999, #doomed)))
  end
  if key == K_QUEUE and #doomed > 0 then redis.call('HDEL', K_HOSTQ, host) end
  dropped = dropped + #doomed
end
if dropped > 0 then redis.call('HINCRBY', K_STATS, 'cancelled', dropped) end
return dropped
