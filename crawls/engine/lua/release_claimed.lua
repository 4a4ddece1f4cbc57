-- Hand back every claimed request (no crash counted) of a crawl that is not running. Only for a
-- crawl whose slices were all stopped: none holds a request any more, and a paused crawl's
-- slices claim nothing. Returns how many.
if redis.call('GET', K_STATE) == 'running' then return 0 end
local count = 0
for _, fp in ipairs(redis.call('HKEYS', K_BACKUP)) do
  count = count + unclaim(fp, false)
end
return count
