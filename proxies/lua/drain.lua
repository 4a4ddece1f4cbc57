-- Take and reset the per-proxy success/failure counters and the log of proxies the pool
-- dropped. KEYS: ok err dropped. Returns {ok pairs, err pairs, dropped entries}.
local ok = redis.call('HGETALL', KEYS[1])
local err = redis.call('HGETALL', KEYS[2])
local dropped = redis.call('LRANGE', KEYS[3], 0, -1)
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return {ok, err, dropped}
