-- Out of every pool at once, and blocked so that nothing in flight brings it back.
-- ARGV: prefix proxy. Returns 1 when it was pooled, else 0.
local existed = redis.call('ZSCORE', ARGV[1] .. 'global', ARGV[2])
remove_all(ARGV[1], ARGV[2])
redis.call('SADD', ARGV[1] .. 'blocked', ARGV[2])
return existed and 1 or 0
