-- Record what a slice did with its claimed requests. ARGV: seen prefix, then per outcome
-- FIELDS fields: fp, host, kind, status or '', nbytes, priority, child depth, retry request
-- (packed) or '', retry delay ms, how many of the first links a sitemap listed, the links, the
-- end of their packed requests (request.packed_tail, the referrer absolute), the sitemaps it
-- lists, the end of theirs. Links (and sitemaps) come as one string, four lines per link: seen
-- bucket, fingerprint, host ('' for the page's own, on its prefix; else '+' and the host when
-- the URL tells it, '-' and its packed host field when it does not), URL; each link's packed request is
-- written here as Request.pack writes it (frontier._link_args says why). Fingerprints come from Python. Per host, an answer counts in
-- K_HOSTDONE, a request that got none (an error, a retry, a failure) in K_HOSTERRORS. A 304 is
-- also 'not_modified'; listed links that are new also count in 'sitemap_urls'.
-- A 'failed' request with a status (it ran out of retries on a 5xx or 429) counts in its status
-- class too, and in 'failed_http'.
-- A 'retry' and a 'crashed' request both wait in delayed as their retry request says (one more
-- attempt, or one more crash); only a retry counts in 'retries'.
-- An 'absent' request is a sitemap file that is not there (a 404): no page of the site, so it
-- is taken back out of 'requests' (freeing its place under max_pages; it stays seen) and
-- counts in 'sitemaps_missing', in no status class; the sitemaps it brings (a site root's
-- robots.txt lines) are queued as a done one's are. The counter invariant holds.
-- Returns what the crawl's log tells (EVENTS in _lib.lua): hosts parked, hosts back to their
-- pace after a push-back.
local prefix = ARGV[1]
local limits, counts = read_limits(), {}
local now = nil
-- Reservations and slowdowns are looked at only while some host has one: each outcome frees
-- its host's reservation if it was never sent, and an answer from a slowed host eases it.
local by_host = redis.call('HLEN', K_HOSTCLAIM) > 0 or redis.call('HLEN', K_HOSTSLOW) > 0
local default_delay = tonumber(redis.call('HGET', K_CONFIG, 'host_delay_ms')) or 0

local FIELDS = 14
local LINK = '([^\n]*)\n([^\n]*)\n([^\n]*)\n([^\n]*)\n'

-- `tail` with its referrer from the "/" after its "://" on (Request.pack's relative referrer,
-- for a link whose URL has the referrer's prefix), and that prefix; `tail` itself and nil
-- when the referrer has no such "/".
local function own_tail(tail)
  local head, referrer, rest = string.match(tail, '^(\n[^\n]*\n[^\n]*\n)([^\n]*)(.*)$')
  local start, path
  if head then start, path = string.match(referrer, '^(.-://[^/]*)(/.*)$') end
  if not path then return tail, nil end
  return head .. path .. rest, start .. '/'
end

-- Queue the links of one string (see the header) whose requests end in `tail`; the first
-- `listed` of them a sitemap listed.
local function admit_links(links, tail, host, priority, child_depth, listed)
  if links == '' then return end
  if limits.max_depth >= 0 and child_depth > limits.max_depth then
    local _, lines = string.gsub(links, '\n', '')
    bump(counts, 'dropped', lines / 4)
    return
  end
  local near, start = own_tail(tail)
  local req, n = {p = priority, d = child_depth}, 0
  for bucket, fp, link_host, url in string.gmatch(links, LINK) do
    n = n + 1
    local member
    if link_host == '' then
      req.h = host
      member = fp .. '\n\n' .. url .. near
    else
      local ending = tail
      if start and string.sub(url, 1, #start) == start then ending = near end
      if string.byte(link_host, 1) == 43 then  -- '+': the URL tells its host
        req.h = string.sub(link_host, 2)
        member = fp .. '\n\n' .. url .. ending
      else  -- '-' and its host field (rare): enqueue reads it as host_of does
        req.h = nil
        member = fp .. '\n' .. string.sub(link_host, 2) .. '\n' .. url .. ending
      end
    end
    local added = admit(limits, counts, prefix .. bucket, fp, member, req)
    if added == 1 and n <= listed then bump(counts, 'sitemap_urls') end
  end
end

local function record_done(status, host, priority, child_depth, i, listed, absent)
  if absent then
    bump(counts, 'requests', -1)
    limits.requests = limits.requests - 1
    bump(counts, 'sitemaps_missing')
  elseif not status then
    bump(counts, 'errors')
  else
    bump(counts, 'responses')
    local class = math.floor(status / 100)
    bump(counts, (class >= 2 and class <= 5) and ('status_' .. class .. 'xx') or 'status_other')
    if status == 304 then bump(counts, 'not_modified') end
  end
  admit_links(ARGV[i + 10], ARGV[i + 11], host, priority, child_depth, listed)
  admit_links(ARGV[i + 12], ARGV[i + 13], host, priority, child_depth, 0)
end

local per_host = {}  -- host -> {done, errors}

local i = 2
while i <= #ARGV do
  local fp, host, kind, status = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
  local nbytes, priority = tonumber(ARGV[i + 4]), tonumber(ARGV[i + 5])
  local child_depth = tonumber(ARGV[i + 6])
  local retry_member, delay_ms, listed = ARGV[i + 7], tonumber(ARGV[i + 8]), tonumber(ARGV[i + 9])
  if by_host then
    unreserve(host, fp)
    if (kind == 'done' or kind == 'absent') and status and status ~= 429 and status ~= 503 then
      now = now or now_ms()
      recover(host, default_delay, now)
    end
  end
  -- Not in backup: the lease expired and the request went back, or it was already completed.
  if redis.call('HDEL', K_BACKUP, fp) == 1 then
    redis.call('ZREM', K_LEASES, fp)
    landed(fp)
    bump(counts, 'bytes', nbytes)
    local tally = per_host[host] or {0, 0}
    per_host[host] = tally
    local answered = kind == 'done' or kind == 'absent'
    if answered and status then tally[1] = tally[1] + 1 else tally[2] = tally[2] + 1 end
    if answered then
      record_done(status, host, priority, child_depth, i, listed, kind == 'absent')
    elseif kind == 'retry' or kind == 'crashed' then
      now = now or now_ms()
      redis.call('ZADD', K_DELAYED, now + delay_ms, retry_member)
      if kind == 'retry' then bump(counts, 'retries') end
    else
      bump(counts, 'failed')
      bump(counts, 'errors')
      -- An error that had an answer (a 500 that used up its retries) is also in its status
      -- class: the status bars show every final status; 'failed_http' counts these.
      if status then
        local class = math.floor(status / 100)
        bump(counts, (class >= 2 and class <= 5) and ('status_' .. class .. 'xx') or 'status_other')
        bump(counts, 'failed_http')
      end
    end
  end
  i = i + FIELDS
end
for host, tally in pairs(per_host) do
  if tally[1] > 0 then redis.call('HINCRBY', K_HOSTDONE, host, tally[1]) end
  if tally[2] > 0 then redis.call('HINCRBY', K_HOSTERRORS, host, tally[2]) end
  now = now or now_ms()
  count_failures(host, tally[1], tally[2], now)
end
flush(counts)
return EVENTS
