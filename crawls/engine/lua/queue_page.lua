-- Up to ARGV[1] queued requests in queue order, with their scores, after the entry ARGV[3]
-- of score ARGV[2] (ARGV[2] == '': from the head). The queue moves while a person pages
-- through it (claims take its head, links join it): past an entry still queued, the page goes
-- on from its rank; past one that left (claimed, dropped), from its place in the order, which
-- is its score, then its bytes among equal scores (how a sorted set orders them). Returns
-- {entry, score, entry, score, ...}.
local n = tonumber(ARGV[1])
if ARGV[2] == '' then return redis.call('ZRANGE', K_QUEUE, 0, n - 1, 'WITHSCORES') end
local rank = redis.call('ZRANK', K_QUEUE, ARGV[3])
if rank then return redis.call('ZRANGE', K_QUEUE, rank + 1, rank + n, 'WITHSCORES') end
local after, member = tonumber(ARGV[2]), ARGV[3]
local out, offset = {}, 0
while #out < 2 * n do
  local chunk = redis.call('ZRANGEBYSCORE', K_QUEUE, ARGV[2], '+inf', 'WITHSCORES',
    'LIMIT', offset, n)
  if #chunk == 0 then break end
  for i = 1, #chunk, 2 do
    if #out < 2 * n and (tonumber(chunk[i + 1]) > after or chunk[i] > member) then
      out[#out + 1] = chunk[i]
      out[#out + 1] = chunk[i + 1]
    end
  end
  offset = offset + n
end
return out
