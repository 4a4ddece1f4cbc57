-- Requests not finished yet: queued + delayed + claimed + waiting in the database, read
-- atomically.
return redis.call('ZCARD', K_QUEUE) + redis.call('ZCARD', K_DELAYED) + redis.call('HLEN', K_BACKUP)
  + (tonumber(redis.call('HGET', K_STATS, 'spilled')) or 0)
