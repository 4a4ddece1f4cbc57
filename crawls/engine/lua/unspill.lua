-- Rows of the database leave the overflow (crawls/engine/overflow.py): ARGV[1] the holder's
-- token, ARGV[2] 'queue' (back into the queue, with the score each had there: the queue's
-- order is kept), 'cancel' (dropped: a host's drop; counted in 'cancelled') or 'drop' (no
-- longer in the crawl's scope: counted in 'cancelled' and 'descoped'), then (fp, score,
-- entry) per row. Their fingerprints go to K_UNSPILLED until
-- the rows are removed, so that a holder cut short before it removed them does not queue
-- them twice: the next holder removes those rows first. Returns how many; -1 for a token
-- that is not the holder's, -2 while an earlier step is left to finish, -3 when the crawl is
-- cancelled (its rows are purged); nothing changes then.
if not overflow_holder(ARGV[1]) then return -1 end
if overflow_staged() then return -2 end
if redis.call('GET', K_STATE) == 'cancelled' then return -3 end
local count = 0
for i = 3, #ARGV, 3 do
  if ARGV[2] == 'queue' and redis.call('ZADD', K_QUEUE, 'NX', ARGV[i + 1], ARGV[i + 2]) == 1 then
    redis.call('HINCRBY', K_HOSTQ, host_of(ARGV[i + 2]), 1)
  end
  redis.call('SADD', K_UNSPILLED, ARGV[i])
  count = count + 1
end
if count > 0 then
  redis.call('HINCRBY', K_STATS, 'spilled', -count)
  if ARGV[2] ~= 'queue' then redis.call('HINCRBY', K_STATS, 'cancelled', count) end
  if ARGV[2] == 'drop' then redis.call('HINCRBY', K_STATS, 'descoped', count) end
end
return count
