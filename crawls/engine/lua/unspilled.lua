-- The rows of these fingerprints (ARGV[2..]) are removed from the database: forget them.
-- Refused (-1) for a token (ARGV[1]) that is not the holder's. Returns how many.
if not overflow_holder(ARGV[1]) then return -1 end
local count = 0
for i = 2, #ARGV, 500 do
  count = count + redis.call('SREM', K_UNSPILLED, unpack(ARGV, i, math.min(i + 499, #ARGV)))
end
return count
