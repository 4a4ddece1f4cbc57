-- Slices registered or beating within their ttl; the others (their worker died) are forgotten.
redis.call('ZREMRANGEBYSCORE', K_SLICES, '-inf', string.format('(%.0f', now_ms()))
return redis.call('ZCARD', K_SLICES)
