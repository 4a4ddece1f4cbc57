-- Every channel's expired leases back to their pools. ARGV: prefix. Returns how many.
local n, now = 0, now_ms()
for _, c in ipairs(redis.call('SMEMBERS', ARGV[1] .. 'channels')) do
  n = n + reap(ARGV[1], c, now, 1000)
end
return n
