-- The requests of K_SPILLING (ARGV[2..]) are in the database now: they leave Redis. Refused
-- (-1) for a token (ARGV[1]) that is not the holder's: the next holder writes them again
-- (a row per request: nothing doubles) and removes them itself. Returns how many left.
if not overflow_holder(ARGV[1]) then return -1 end
local count = 0
for i = 2, #ARGV, 500 do
  count = count + redis.call('ZREM', K_SPILLING, unpack(ARGV, i, math.min(i + 499, #ARGV)))
end
return count
