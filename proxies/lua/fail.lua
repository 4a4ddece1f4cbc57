-- A proxy failed for its holder: 'timeout'/'error' cost a point (0 removes it), 'refused'
-- removes it from every pool, 'ban' drops it from this channel only for ban_ms.
-- KEYS: chan lease held banned. ARGV: prefix proxy token reason ban_ms channel initial_score.
-- Returns 'kept', 'banned', 'removed' or 'gone' (already out of the global pool).
local prefix, p, reason = ARGV[1], ARGV[2], ARGV[4]
local chan, lease, held, banned = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now = now_ms()
local h = redis.call('HGET', held, p)
local base, strategy = nil, nil
if h then
  local token, b, s = split_held(h)
  if token == ARGV[3] then
    base, strategy = b, s
    redis.call('HDEL', held, p)
    redis.call('ZREM', lease, p)
  end
end
redis.call('HINCRBY', prefix .. 'err', p, 1)
redis.call('HINCRBY', prefix .. 'stats', 'fail:' .. reason, 1)
if not redis.call('ZSCORE', prefix .. 'global', p) then return 'gone' end
local function drop(why)
  remove_all(prefix, p)
  local entry = p .. '|' .. why .. ' (channel ' .. ARGV[6] .. ')|' .. now
  redis.call('RPUSH', prefix .. 'dropped', entry)
  redis.call('LTRIM', prefix .. 'dropped', -10000, -1)
  return 'removed'
end
if reason == 'refused' then return drop('connection refused') end
if reason == 'ban' then
  redis.call('ZREM', chan, p)
  redis.call('HDEL', prefix .. 'tier:' .. ARGV[6], p)
  redis.call('ZADD', banned, now + tonumber(ARGV[5]), p)
  return 'banned'
end
local score = tonumber(redis.call('ZSCORE', prefix .. 'score', p) or ARGV[7]) - 1
if score <= 0 then return drop(reason .. ', score 0') end
redis.call('ZADD', prefix .. 'score', score, p)
if base then put_back(chan, p, base, strategy, false) end
return 'kept'
