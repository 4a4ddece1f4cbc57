-- The host answered a request (ARGV: host, fp), or the request gave up on it: the host's
-- reservation ends, the request is no longer in flight, and the host's next allowed time is no
-- earlier than now + its delay, so that the delay holds between the host's arrivals even when
-- this request took a while to reach it.
local host, fp = ARGV[1], ARGV[2]
unreserve(host, fp)
landed(fp)
local delay = host_delay(host, tonumber(redis.call('HGET', K_CONFIG, 'host_delay_ms')) or 0)
if delay > 0 then
  local next_ms = now_ms() + delay
  if next_ms > (tonumber(redis.call('HGET', K_HOSTS, host)) or 0) then
    redis.call('HSET', K_HOSTS, host, next_ms)
  end
end
return delay
