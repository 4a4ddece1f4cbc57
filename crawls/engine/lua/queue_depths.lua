-- The queue's requests per priority and depth, read from their scores (_lib.lua's score():
-- each (priority, depth) is one range of DEPTH_UNIT scores), without reading a request: two
-- O(log N) calls per group, at most ARGV[1] groups. Returns {priority, depth, count, ...}, in
-- queue order, and a last 1 when groups were left out (0 when none was).
local limit = tonumber(ARGV[1])
local out = {}
local first = redis.call('ZRANGE', K_QUEUE, 0, 0, 'WITHSCORES')
local groups = 0
while #first > 0 do
  if groups >= limit then
    out[#out + 1] = 1
    return out
  end
  local s = tonumber(first[2])
  local p = -math.floor(s / PRIORITY_UNIT)
  local d = math.floor((s + p * PRIORITY_UNIT) / DEPTH_UNIT)
  local lo = -p * PRIORITY_UNIT + d * DEPTH_UNIT
  local hi = string.format('%.0f', lo + DEPTH_UNIT)
  out[#out + 1] = p
  out[#out + 1] = d
  out[#out + 1] = redis.call('ZCOUNT', K_QUEUE, string.format('%.0f', lo), '(' .. hi)
  groups = groups + 1
  first = redis.call('ZRANGEBYSCORE', K_QUEUE, hi, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
end
out[#out + 1] = 0
return out
