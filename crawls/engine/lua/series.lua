-- The pages/s chart's data: "unix_s:responses" points. ARGV: points kept, points returned,
-- 1 to record the current responses count first (skipped when this second has a point).
if ARGV[3] == '1' then
  local now = math.floor(now_ms() / 1000)
  local last = redis.call('LINDEX', K_SERIES, -1)
  if not last or tonumber(string.match(last, '^(%d+)')) < now then
    local responses = tonumber(redis.call('HGET', K_STATS, 'responses')) or 0
    redis.call('RPUSH', K_SERIES, now .. ':' .. responses)
    redis.call('LTRIM', K_SERIES, -tonumber(ARGV[1]), -1)
  end
end
return redis.call('LRANGE', K_SERIES, -tonumber(ARGV[2]), -1)
