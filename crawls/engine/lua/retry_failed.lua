-- Queue failed requests again (ARGV: JSONs with attempts reset) without a dedup check, and
-- take them off failed and errors so the counter invariant holds. Never more than `failed`,
-- never one that is claimed right now. Returns how many were queued.
local available = tonumber(redis.call('HGET', K_STATS, 'failed')) or 0
local count = 0
for _, member in ipairs(ARGV) do
  if count >= available then break end
  local req = cjson.decode(member)
  if redis.call('HEXISTS', K_BACKUP, req.f) == 0 then
    count = count + enqueue(member, req)
  end
end
if count > 0 then
  redis.call('HINCRBY', K_STATS, 'failed', -count)
  redis.call('HINCRBY', K_STATS, 'errors', -count)
end
return count
