-- A fetch made on a page's behalf outside the page's own turn (the login step renewing an
-- expired session) keeps the host's delay like any request (ARGV: host, phase). phase "send":
-- 0 when it may go now (the host's next allowed time becomes now + its delay), else the ms to
-- wait. phase "answered": the host's next allowed time is no earlier than now + its delay.
-- Reservations are not taken or checked: the page that needs the login may hold its host's.
local host, phase = ARGV[1], ARGV[2]
local delay = host_delay(host, tonumber(redis.call('HGET', K_CONFIG, 'host_delay_ms')) or 0)
if delay <= 0 then return 0 end
local now = now_ms()
local next_ms = tonumber(redis.call('HGET', K_HOSTS, host)) or 0
if phase == 'send' then
  if next_ms > now then return next_ms - now end
  redis.call('HSET', K_HOSTS, host, now + delay)
elseif now + delay > next_ms then
  redis.call('HSET', K_HOSTS, host, now + delay)
end
return 0
