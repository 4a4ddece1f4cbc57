-- Mark slices (ARGV[2..]) alive for ARGV[1] ms more: at registration, then at every beat.
local deadline = now_ms() + tonumber(ARGV[1])
for i = 2, #ARGV do
  redis.call('ZADD', K_SLICES, deadline, ARGV[i])
end
return #ARGV - 1
