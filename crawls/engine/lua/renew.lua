-- Push the lease deadline of requests a live worker still holds to now + ARGV[1] ms. ARGV[2..]
-- are fingerprints; XX: a lease that already expired and went back is not brought back.
local deadline = now_ms() + tonumber(ARGV[1])
for i = 2, #ARGV do
  redis.call('ZADD', K_LEASES, 'XX', deadline, ARGV[i])
end
return 0
