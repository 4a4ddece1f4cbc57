-- Requests not finished yet: queued + delayed + claimed, read atomically.
return redis.call('ZCARD', K_QUEUE) + redis.call('ZCARD', K_DELAYED) + redis.call('HLEN', K_BACKUP)
