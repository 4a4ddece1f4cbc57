-- Give a lease back with its outcome (see give_back). KEYS: chan lease held.
-- ARGV: prefix proxy token latency outcome greedy_ms initial_score. Returns 1, or 0 when late.
local a = ARGV
return give_back(a[1], KEYS[1], KEYS[2], KEYS[3], a[2], a[3], tonumber(a[4]), a[5],
                 tonumber(a[6]), a[7])
