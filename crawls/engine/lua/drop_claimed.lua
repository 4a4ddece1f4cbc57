-- Drop claimed requests a slice will not fetch (ARGV: their fingerprints): the crawl's scope
-- changed and they no longer fit it. Each one still claimed leaves the backup, its lease, its
-- host's reservation and the requests in flight, and counts in 'cancelled' (so that the
-- counter invariant holds) and in 'descoped'. One whose lease ran out meanwhile is no longer
-- claimed and is left alone. Returns how many were dropped.
local dropped = 0
for _, fp in ipairs(ARGV) do
  local member = redis.call('HGET', K_BACKUP, fp)
  if member then
    redis.call('HDEL', K_BACKUP, fp)
    redis.call('ZREM', K_LEASES, fp)
    unreserve(host_of(member), fp)
    landed(fp)
    dropped = dropped + 1
  end
end
if dropped > 0 then
  redis.call('HINCRBY', K_STATS, 'cancelled', dropped)
  redis.call('HINCRBY', K_STATS, 'descoped', dropped)
end
return dropped
