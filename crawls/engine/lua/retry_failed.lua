-- Queue failed requests again (ARGV: pairs of a packed request with attempts reset and the HTTP status
-- class its last attempt got, '' for none) without a dedup check, and take them off failed and
-- errors (and off their status class and failed_http) so the counters hold. Never more than
-- `failed`, never one that is claimed right now. Returns how many were queued.
local available = tonumber(redis.call('HGET', K_STATS, 'failed')) or 0
local count, counts = 0, {}
for i = 1, #ARGV, 2 do
  if count >= available then break end
  local member, class = ARGV[i], ARGV[i + 1]
  if redis.call('HEXISTS', K_BACKUP, fp_of(member)) == 0 then
    local queued = enqueue(member)
    count = count + queued
    if queued > 0 and class ~= '' then
      bump(counts, class, -1)
      bump(counts, 'failed_http', -1)
    end
  end
end
if count > 0 then
  redis.call('HINCRBY', K_STATS, 'failed', -count)
  redis.call('HINCRBY', K_STATS, 'errors', -count)
end
flush(counts)
return count
