-- Every request whose lease deadline has passed goes back to the queue, with one more crash,
-- and counts in 'recovered' (handed out again: its first worker may have fetched it already).
-- Returns how many.
local count = 0
for _, fp in ipairs(redis.call('ZRANGEBYSCORE', K_LEASES, '-inf', now_ms())) do
  count = count + unclaim(fp, true)
end
if count > 0 then redis.call('HINCRBY', K_STATS, 'recovered', count) end
return count
