-- Take the ARGV[2] lowest-ranked queued requests (the queue's tail) out of the queue into
-- K_SPILLING, with their scores, for the database (crawls/engine/overflow.py). They count in
-- 'spilled' from now on, so the counter invariant holds whatever happens next. ARGV[1]: the
-- overflow holder's token. Returns {entry, score, ...}; {-1} for a token that is not the
-- holder's, {-2} while an earlier step is left to finish (nothing taken), {} when the crawl
-- is cancelled.
if not overflow_holder(ARGV[1]) then return {-1} end
if overflow_staged() then return {-2} end
if redis.call('GET', K_STATE) == 'cancelled' then return {} end
local n = tonumber(ARGV[2])
if n <= 0 then return {} end
local tail = redis.call('ZRANGE', K_QUEUE, -n, -1, 'WITHSCORES')
if #tail == 0 then return {} end
redis.call('ZREMRANGEBYRANK', K_QUEUE, -(#tail / 2), -1)
for i = 1, #tail, 2 do
  redis.call('ZADD', K_SPILLING, tail[i + 1], tail[i])
  dequeued(host_of(tail[i]))
end
redis.call('HINCRBY', K_STATS, 'spilled', #tail / 2)
return tail
