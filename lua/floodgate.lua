#!lua flags=allow-key-locking
--[[
Floodgate: decides ALL of a request's rules in one atomic call. The only place limiting logic lives.

The shebang tells Upstash to lock only the keys in KEYS (not the whole database), which is why every key
this script touches arrives in KEYS and no key is shared by all identities. Stock Redis rejects the flag;
the local REST server strips it (and maps the SHA) the way Upstash accepts it.

KEYS (2 per rule, rule i = 1..n):
  KEYS[2i-1]  state key    <prefix>:<rule>:<hash>            (layout per algorithm below)
  KEYS[2i]    override     <prefix>:override:<rule>:<hash>   hash: limit, period (MILLISECONDS), burst;
                                                              read only; absent burst = the override's limit
ARGV:
  ARGV[1]  time offset, ms added to Redis TIME. ALWAYS 0 in production; tests use it to travel in time.
  ARGV[2]  request id: the concurrency lease member and part of sliding-log members
  ARGV[3]  peek: "1" = evaluate with the given cost but write nothing (admin API), "0" = decide
  then 6 per rule, starting at ARGV[4 + 6(i-1)]:
    algorithm  1 fixed-window | 2 sliding-window | 3 sliding-log | 4 token-bucket | 5 gcra | 6 concurrency
    limit      units per period (concurrency: requests in flight), tier already applied by the edge
    period     ms (concurrency: lease after which an unreleased slot is freed)
    burst      token-bucket capacity / gcra burst (units a fresh identity may spend at once)
    cost       units this request consumes, >= 1 (ignored by concurrency: one slot)
    mode       1 on (can deny) | 0 monitor (reported, never denies)

Returns an array of integers only: { allowed, then 5 per rule }
  [1]          1 if every `on` rule allows (and then every allowing rule was written), else 0
  [2 + 5(i-1)] outcome: 0 denied | 1 allowed | 2 cost exceeds what the rule can ever grant
  [3 + 5(i-1)] limit in force (after override)
  [4 + 5(i-1)] remaining: units available after this call (after consumption if written, else as now)
  [5 + 5(i-1)] reset_after_ms: until the rule is fully reset (window end, bucket full); 0 when untouched
  [6 + 5(i-1)] retry_after_ms: denied: when the same request would be allowed absent other traffic
               (cost exceeds capacity: one period); allowed: until more quota is available, 0 when full

Semantics: phase 1 evaluates every rule without writing. Only if every `on` rule allows does phase 2
write each ALLOWING rule: a denied request consumes nothing anywhere (no partial counting), and a
`monitor` rule that would deny is reported but not written, exactly as if it were enforcing alone.

State layout per algorithm (one key per identity; every write carries a TTL within one period of its window):
  fixed-window    integer counter, expires AT the epoch-aligned window end
  sliding-window  string "window:prev:cur" (window = floor(now / period)), lives until the next window ends
  sliding-log     ZSET, one member per unit, score = time in µs; expires one period after the newest
  token-bucket,   integer TAT (theoretical arrival time, µs): both algorithms ARE the same state;
  gcra            emission interval = ceil(period / limit) in whole µs; expires when the bucket is full
  concurrency     ZSET of request ids scored by lease expiry (µs); expired leases dropped on acquire
]]

local offset_ms = tonumber(ARGV[1]) -- ms
local request_id = ARGV[2]
local peek = ARGV[3] == "1"

-- Time is Redis's, never the edge's: every edge node agrees on one clock.
local time = redis.call("TIME")
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2]) + offset_ms * 1000 -- µs
local now_ms = math.floor(now_us / 1000) -- ms

local floor, ceil, max = math.floor, math.ceil, math.max

-- Lua turns numbers into strings with 14 digits; state holds up to 16 (µs timestamps).
local function int(n)
  return string.format("%.0f", n)
end

-- µs → ms, rounded up so that waiting that long is always enough.
local function ms_up(us)
  if us <= 0 then
    return 0
  end
  return ceil(us / 1000)
end

-- Milliseconds since the epoch on Redis's expiry clock (which knows nothing of the test offset).
local function expire_at_ms(at_us)
  return int(ceil(at_us / 1000) - offset_ms)
end

local FIXED, SLIDING, LOG, BUCKET, GCRA, CONCURRENCY = 1, 2, 3, 4, 5, 6

--[[ Each evaluate(r) reads state and fills r:
  r.allow      boolean: this request fits
  r.avail      units available now, r.avail_after: after consuming this request
  r.reset      / r.reset_after:  ms until fully reset, now / after consuming
  r.more       / r.more_after:   ms until more quota is available (0 when full), now / after consuming
  r.retry      ms until the request would fit (only read when denied)
  r.write      function() persisting the consumption (only called when allowed) ]]
local evaluate = {}

evaluate[FIXED] = function(r, key)
  local start_ms = now_ms - now_ms % r.period
  local end_us = (start_ms + r.period) * 1000
  local used = tonumber(redis.call("GET", key) or 0)
  -- A script's keys expire on the clock read when it started, TIME is read a moment later: in the
  -- first instant of a window the previous window's counter may still be visible. Its PTTL gives it away.
  if used > 0 and now_us - start_ms * 1000 < 2000 and redis.call("PTTL", key) < r.period / 2 then
    used = 0
  end
  local after = used + r.cost
  r.allow = after <= r.limit
  r.avail, r.avail_after = max(0, r.limit - used), r.limit - after
  r.reset = used > 0 and ms_up(end_us - now_us) or 0
  r.reset_after = ms_up(end_us - now_us)
  r.more, r.more_after = r.reset, r.reset_after
  r.retry = r.reset_after -- the next window grants the whole limit, and cost <= limit here
  r.write = function()
    redis.call("SET", key, after, "PXAT", expire_at_ms(end_us))
  end
end

-- Sliding window: the previous window's count, weighted by how much of it is still in view, plus the
-- current window's. wait_us(prev, cur, need) is how long until prev*weight + cur + need <= limit.
local function sliding_wait_us(r, start_us, prev, cur, need)
  local period_us = r.period * 1000
  if cur + need <= r.limit then
    if prev == 0 then
      return 0
    end
    -- prev * (period - e) / period <= limit - need - cur, solved for e (µs into the current window)
    local e = period_us * (1 - (r.limit - need - cur) / prev)
    return max(0, start_us + e - now_us)
  end
  -- Only the next window can fit it: there cur becomes prev
  local e = period_us * (1 - (r.limit - need) / cur)
  return start_us + period_us + e - now_us
end

evaluate[SLIDING] = function(r, key)
  local window = floor(now_ms / r.period)
  local start_us = window * r.period * 1000
  local period_us = r.period * 1000
  local prev, cur = 0, 0
  local raw = redis.call("GET", key)
  if raw then
    local w, p, c = string.match(raw, "^(%d+):(%d+):(%d+)$")
    w, p, c = tonumber(w), tonumber(p), tonumber(c)
    if w == window then
      prev, cur = p, c
    elseif w == window - 1 then
      prev = c
    end
  end
  local in_view_us = start_us + period_us - now_us -- µs of the previous window still in view
  -- Compared as prev * in_view + (cur + cost) * period <= limit * period: exact in doubles for sane sizes.
  local function fits(c)
    return prev * in_view_us + c * period_us <= r.limit * period_us
  end
  local estimate = prev * in_view_us / period_us + cur
  local cur_after = cur + r.cost
  r.allow = fits(cur + r.cost)
  r.avail = max(0, floor(r.limit - estimate + 1e-9))
  r.avail_after = max(0, floor(r.limit - estimate - r.cost + 1e-9))
  local end_us = start_us + period_us
  r.reset = (cur > 0 and ms_up(end_us + period_us - now_us)) or (prev > 0 and ms_up(end_us - now_us)) or 0
  r.reset_after = ms_up(end_us + period_us - now_us)
  r.more = r.avail >= r.limit and 0 or ms_up(sliding_wait_us(r, start_us, prev, cur, r.avail + 1))
  r.more_after = ms_up(sliding_wait_us(r, start_us, prev, cur_after, r.avail_after + 1))
  -- +1 ms: rounding the exact instant up to whole ms must never land on "still denied".
  r.retry = ms_up(sliding_wait_us(r, start_us, prev, cur, r.cost)) + 1
  r.write = function()
    redis.call("SET", key, int(window) .. ":" .. int(prev) .. ":" .. int(cur_after), "PXAT", expire_at_ms(end_us + period_us))
  end
end

evaluate[LOG] = function(r, key)
  local period_us = r.period * 1000
  local since = "(" .. int(now_us - period_us) -- members newer than this are in the window
  local used = redis.call("ZCOUNT", key, since, "+inf")
  local oldest_us, newest_us = now_us, now_us
  if used > 0 then
    oldest_us = tonumber(redis.call("ZRANGEBYSCORE", key, since, "+inf", "WITHSCORES", "LIMIT", 0, 1)[2])
    newest_us = tonumber(redis.call("ZREVRANGEBYSCORE", key, "+inf", since, "WITHSCORES", "LIMIT", 0, 1)[2])
  end
  local after = used + r.cost
  r.allow = after <= r.limit
  r.avail, r.avail_after = max(0, r.limit - used), r.limit - after
  r.reset = used > 0 and ms_up(newest_us + period_us - now_us) or 0
  r.reset_after = r.period
  r.more = used > 0 and ms_up(oldest_us + period_us - now_us) or 0
  r.more_after = ms_up(oldest_us + period_us - now_us)
  r.retry = 0
  if not r.allow and r.cost <= r.limit then -- (a larger cost is reported as such by the caller)
    -- The request fits once the (after - limit)-th oldest unit has left the window.
    local k = after - r.limit
    local nth = redis.call("ZRANGEBYSCORE", key, since, "+inf", "WITHSCORES", "LIMIT", k - 1, 1)
    r.retry = ms_up(tonumber(nth[2]) + period_us - now_us)
  end
  r.write = function()
    redis.call("ZREMRANGEBYSCORE", key, "-inf", int(now_us - period_us))
    local score, prefix = int(now_us), request_id .. ":" .. int(now_us) .. ":"
    local batch = {}
    for unit = 1, r.cost do
      batch[#batch + 1] = score
      batch[#batch + 1] = prefix .. unit
      if #batch >= 1000 or unit == r.cost then -- unpack() has a stack limit
        redis.call("ZADD", key, unpack(batch))
        batch = {}
      end
    end
    redis.call("PEXPIREAT", key, expire_at_ms(now_us + period_us))
  end
end

-- Token bucket and GCRA: one TAT. Tokens available = (now + capacity - TAT) / interval, at most burst.
local function evaluate_tat(r, key)
  local interval_us = ceil(r.period * 1000 / r.limit) -- whole µs keep the arithmetic exact
  local capacity_us = r.burst * interval_us
  local tat_us = max(tonumber(redis.call("GET", key) or 0), now_us)
  local tat_after_us = tat_us + r.cost * interval_us
  r.allow = tat_after_us - now_us <= capacity_us
  r.avail = floor((now_us + capacity_us - tat_us) / interval_us)
  r.avail_after = floor((now_us + capacity_us - tat_after_us) / interval_us)
  r.reset = ms_up(tat_us - now_us)
  r.reset_after = ms_up(tat_after_us - now_us)
  -- The next whole unit arrives when now + capacity - TAT reaches (avail_after + 1) intervals.
  r.more = r.avail >= r.burst and 0 or ms_up(tat_us - capacity_us + (r.avail + 1) * interval_us - now_us)
  r.more_after = ms_up(tat_after_us - capacity_us + (r.avail_after + 1) * interval_us - now_us)
  r.retry = ms_up(tat_after_us - capacity_us - now_us)
  r.write = function()
    redis.call("SET", key, int(tat_after_us), "PXAT", expire_at_ms(tat_after_us))
  end
end
evaluate[BUCKET] = evaluate_tat
evaluate[GCRA] = evaluate_tat

evaluate[CONCURRENCY] = function(r, key)
  local period_us = r.period * 1000
  local live = "(" .. int(now_us) -- leases expiring after now still hold a slot
  local held = redis.call("ZCOUNT", key, live, "+inf")
  r.cost = 1
  r.allow = held + 1 <= r.limit
  r.avail, r.avail_after = max(0, r.limit - held), r.limit - held - 1
  r.reset, r.retry = 0, 0
  if held > 0 then
    local last = redis.call("ZREVRANGEBYSCORE", key, "+inf", live, "WITHSCORES", "LIMIT", 0, 1)
    r.reset = ms_up(tonumber(last[2]) - now_us)
    -- Absent other traffic (no release), a slot is certain to free when the earliest lease runs out.
    local first = redis.call("ZRANGEBYSCORE", key, live, "+inf", "WITHSCORES", "LIMIT", 0, 1)
    r.retry = ms_up(tonumber(first[2]) - now_us)
  end
  r.reset_after = r.period
  r.more, r.more_after = 0, 0 -- a slot frees on release, which no clock can predict
  r.write = function()
    redis.call("ZREMRANGEBYSCORE", key, "-inf", int(now_us))
    redis.call("ZADD", key, int(now_us + period_us), request_id)
    redis.call("PEXPIREAT", key, expire_at_ms(now_us + period_us))
  end
end

-- Phase 1: evaluate every rule, write nothing.
local rules = {}
local allowed = true
for i = 1, (#ARGV - 3) / 6 do
  local a = 3 + (i - 1) * 6
  local r = {
    algorithm = tonumber(ARGV[a + 1]),
    limit = tonumber(ARGV[a + 2]), -- units
    period = tonumber(ARGV[a + 3]), -- ms
    burst = tonumber(ARGV[a + 4]), -- units
    cost = tonumber(ARGV[a + 5]), -- units
    on = ARGV[a + 6] == "1",
  }
  -- Overrides are read here, in the same atomic call, so "read override" and "apply limit" cannot race.
  local o = redis.call("HMGET", KEYS[2 * i], "limit", "period", "burst")
  if o[1] then
    r.limit = tonumber(o[1])
    r.burst = tonumber(o[3] or o[1])
  elseif o[3] then
    r.burst = tonumber(o[3])
  end
  if o[2] then
    r.period = tonumber(o[2])
  end
  local capacity = (r.algorithm == BUCKET or r.algorithm == GCRA) and r.burst or r.limit
  if r.algorithm == CONCURRENCY then
    r.cost = 1
  end
  if r.limit > 0 then
    evaluate[r.algorithm](r, KEYS[2 * i - 1])
  else -- an override of limit 0 blocks the identity
    r.avail, r.reset = 0, 0
  end
  r.outcome = r.allow and 1 or 0
  if r.limit <= 0 or r.cost > capacity then
    -- More than the rule can ever grant: denied with a clear outcome, never counted, never a Lua error.
    r.outcome, r.allow, r.retry = 2, false, r.period
  end
  if r.on and not r.allow then
    allowed = false
  end
  rules[i] = r
end

-- Phase 2: write only if the request as a whole is allowed.
local reply = { allowed and 1 or 0 }
for i, r in ipairs(rules) do
  local written = allowed and r.allow and not peek
  if written then
    r.write()
  end
  local n = #reply
  reply[n + 1] = r.outcome
  reply[n + 2] = r.limit
  reply[n + 3] = written and r.avail_after or r.avail
  reply[n + 4] = written and r.reset_after or r.reset
  reply[n + 5] = r.allow and (written and r.more_after or r.more) or r.retry
end
return reply
