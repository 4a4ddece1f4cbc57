-- One validation outcome. ARGV: prefix proxy url ok reason latency initial_score admit.
-- Returns {score, status}: status 'pool' (in the pools), 'out' (not admitted) or 'removed'.
local prefix, p = ARGV[1], ARGV[2]
local in_pool = redis.call('ZSCORE', prefix .. 'global', p) ~= false
local score = tonumber(redis.call('ZSCORE', prefix .. 'score', p) or ARGV[7])
local admit = ARGV[8] == '1' and redis.call('SISMEMBER', prefix .. 'blocked', p) == 0
if ARGV[4] == '1' then
  score = raised(score)
  if in_pool or admit then
    redis.call('DEL', prefix .. 'topup')  -- channels below their size may find it now
    redis.call('ZADD', prefix .. 'global', tonumber(ARGV[6]), p)
    redis.call('ZADD', prefix .. 'score', score, p)
    redis.call('ZADD', prefix .. 'checked', now_ms(), p)
    redis.call('HSET', prefix .. 'url', p, ARGV[3])
    return {tostring(score), 'pool'}
  end
  return {tostring(score), 'out'}
end
if ARGV[5] == 'refused' then
  remove_all(prefix, p)
  return {tostring(score), 'removed'}
end
score = score - 1
if score <= 0 then
  remove_all(prefix, p)
  return {'0', 'removed'}
end
if in_pool then redis.call('ZADD', prefix .. 'score', score, p) end
return {tostring(score), in_pool and 'pool' or 'out'}
