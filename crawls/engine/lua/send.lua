-- May a claimed request go to its host now (ARGV: host, fp)? Yes when the host has no delay,
-- or its next allowed time has passed and no other request holds its reservation: its next
-- allowed time becomes now + its delay, and the request keeps the reservation until the host
-- answers (answered.lua). No when the host became slower since the claim (a push-back, a
-- robots.txt Crawl-delay): the request goes back. Returns the delay in ms, or -1 for no.
local host, fp = ARGV[1], ARGV[2]
local reserved = redis.call('HGET', K_HOSTCLAIM, host)
local delay = host_delay(host, tonumber(redis.call('HGET', K_CONFIG, 'host_delay_ms')) or 0)
if delay > 0 then
  local now = now_ms()
  if (tonumber(redis.call('HGET', K_HOSTS, host)) or 0) > now or (reserved and reserved ~= fp) then
    if reserved == fp then redis.call('HDEL', K_HOSTCLAIM, host) end
    return -1
  end
  redis.call('HSET', K_HOSTS, host, now + delay)
elseif reserved == fp then
  redis.call('HDEL', K_HOSTCLAIM, host)
end
return delay
