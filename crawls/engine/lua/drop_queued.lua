-- Drop waiting requests that no longer fit the crawl's scope: ARGV[1] says where they wait
-- ('queue', or 'delayed' for retries), the rest are the entries, as read from there. An entry
-- no longer there (claimed, or its retry moved to the queue meanwhile) is left alone; each
-- one removed counts in 'cancelled' (the counter invariant) and in 'descoped'. Returns how
-- many were dropped.
local key = ARGV[1] == 'delayed' and K_DELAYED or K_QUEUE
local dropped = 0
for i = 2, #ARGV do
  if redis.call('ZREM', key, ARGV[i]) == 1 then
    dropped = dropped + 1
    if key == K_QUEUE then dequeued(host_of(ARGV[i])) end
  end
end
if dropped > 0 then
  redis.call('HINCRBY', K_STATS, 'cancelled', dropped)
  redis.call('HINCRBY', K_STATS, 'descoped', dropped)
end
return dropped
