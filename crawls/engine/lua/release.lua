-- Hand back claimed requests by fingerprint (ARGV). Counters are untouched. Returns how many.
local count = 0
for _, fp in ipairs(ARGV) do
  count = count + unclaim(fp, false)
end
return count
