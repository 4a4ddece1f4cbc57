-- Mark slices (ARGV[2..]) alive for ARGV[1] ms more: at registration, then at every beat.
-- A cancelled crawl has no slice to keep alive: a slice still finishing a page of a crawl
-- deleted meanwhile (its keys retired, its state "cancelled") writes no key again.
if redis.call('GET', K_STATE) == 'cancelled' then return 0 end
local deadline = now_ms() + tonumber(ARGV[1])
for i = 2, #ARGV do
  redis.call('ZADD', K_SLICES, deadline, ARGV[i])
end
return #ARGV - 1
