-- Every request whose lease deadline has passed goes back to the queue, with one more crash.
-- Returns how many.
local count = 0
for _, fp in ipairs(redis.call('ZRANGEBYSCORE', K_LEASES, '-inf', now_ms())) do
  count = count + unclaim(fp, true)
end
return count
