-- Add seed requests. ARGV: seen prefix, priority, depth, then (bucket, fp, packed request) per seed.
-- Returns {added, repeats}.
local prefix, req = ARGV[1], {p = tonumber(ARGV[2]), d = tonumber(ARGV[3])}
local limits, counts = read_limits(), {}
local added = 0
for i = 4, #ARGV, 3 do
  added = added + admit(limits, counts, prefix .. ARGV[i], ARGV[i + 1], ARGV[i + 2], req)
end
flush(counts)
return {added, counts.repeats or 0}
