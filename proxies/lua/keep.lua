-- Keep a lease and renew it: the greedy strategy's "same proxy for the next request". Records
-- the success (latency >= 0) as release does, then drops the proxy from the channel instead
-- when it no longer fits the rule that admitted it. 1 when the token still holds it, else 0.
-- KEYS: lease held. ARGV: prefix channel proxy token lease_ms latency initial_score, the rule (5).
local a = ARGV
local prefix, channel, p = a[1], a[2], a[3]
local h = redis.call('HGET', KEYS[2], p)
if not h or split_held(h) ~= a[4] then return 0 end
if not redis.call('ZSCORE', prefix .. 'global', p) then return 0 end
local now, latency = now_ms(), tonumber(a[6])
if latency >= 0 then record_ok(prefix, p, latency, a[7]) end
if not fits(prefix, channel, p, now, rule_from(a, 8)) then
  redis.call('HDEL', KEYS[2], p)
  redis.call('ZREM', KEYS[1], p)
  redis.call('HDEL', prefix .. 'tier:' .. channel, p)
  redis.call('HINCRBY', prefix .. 'stats', 'evicted', 1)
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(a[5]), p)
redis.call('HINCRBY', prefix .. 'stats', 'kept', 1)
return 1
