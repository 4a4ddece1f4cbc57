-- Test-and-add fingerprints without scheduling anything (e.g. a redirect target about to be
-- followed). ARGV: seen prefix, then (bucket, fp) pairs. Returns 1 per newly seen, 0 per repeat.
local added = {}
for i = 2, #ARGV, 2 do
  added[#added + 1] = redis.call('SADD', ARGV[1] .. ARGV[i], ARGV[i + 1])
end
return added
