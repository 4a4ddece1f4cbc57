-- Lease the head of a channel's pool (see take). KEYS: chan lease held banned.
-- ARGV: prefix channel lease_ms strategy token, the rule (min_score max_age_ms max_latency_ms
-- need scan), then the proxies to pass over (exclude).
-- Returns {proxy, url}, or when there is none to give how many of the channel's are leased.
local a = ARGV
local got = take(a[1], a[2], KEYS[1], KEYS[2], KEYS[3], KEYS[4], now_ms(), tonumber(a[3]), a[4],
                 a[5], rule_from(a, 6), set_of(a, 11))
if not got then return redis.call('ZCARD', KEYS[2]) end
return got
