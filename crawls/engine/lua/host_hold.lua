-- An operator holds a host until ARGV[2] (ms), or releases it (ARGV[2] ''): a held host is
-- given no request (claim.lua), whatever its delay; requests already claimed go on. Released,
-- it may be asked at once, unless its delay or a push-back says otherwise.
local host, until_ms = ARGV[1], tonumber(ARGV[2])
if until_ms then
  redis.call('HSET', K_HOSTHELD, host, until_ms)
else
  redis.call('HDEL', K_HOSTHELD, host)
end
redis.call('HDEL', K_HOSTPARKED, host)  -- an operator's word replaces a parking's
return 0
