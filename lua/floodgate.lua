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
  ARGV[1]  time offset, ms added to Redis TIME. ALWAYS 0 in production; tests use it to travel in time
           (fixed-window counters expire on Redis's real clock: for them only offsets within one window hold).
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

-- This chunk runs on every call, so it defines few functions and allocates few tables: measured here, a
-- table with a dozen named fields costs about as much as a Redis command.
local floor, ceil, format = math.floor, math.ceil, string.format
-- Algorithm codes, compared as the strings they arrive as (cheaper than tonumber).
local FIXED, SLIDING, LOG, BUCKET, GCRA, CONCURRENCY = "1", "2", "3", "4", "5", "6"
-- A write waiting for phase 2 (an array: allocation is what a script call mostly pays for here).
local AT, KEY, COST, PERIOD_US, ALGORITHM, VALUE, EXPIRE_US, INCREMENT, CLEAR = 1, 2, 3, 4, 5, 6, 7, 8, 9
local AVAIL_AFTER, RESET_AFTER, MORE_AFTER, COST_ARG = 10, 11, 12, 13
-- (Lua numbers given to redis.call are formatted by Redis, which costs more than passing strings.)

-- µs → ms, rounded up so that waiting that long is always enough.
local function ms_up(us)
  if us <= 0 then
    return 0
  end
  return ceil(us / 1000)
end

-- Sliding window: µs until prev * (share of the previous window still in view) + cur + need <= limit.
local function sliding_wait_us(limit, period_us, start_us, prev, cur, need)
  if cur + need <= limit then
    if prev == 0 then
      return 0
    end
    -- prev * (period - e) / period <= limit - need - cur, solved for e (µs into the current window)
    return start_us + period_us * (1 - (limit - need - cur) / prev) - now_us
  end
  -- Only the next window can fit it: there cur becomes prev.
  return start_us + period_us + period_us * (1 - (limit - need) / cur) - now_us
end

-- Phase 1: evaluate every rule, write nothing. The reply gets each rule's values as things stand now;
-- an allowing rule also leaves its write, and its values after that write, in `pending`.
local n = (#ARGV - 3) / 6
local reply = { 1 }
local pending = {}
local allowed = true
for i = 1, n do
  local a = 3 + (i - 1) * 6
  local algorithm = ARGV[a + 1]
  local limit = tonumber(ARGV[a + 2]) -- units
  local period = tonumber(ARGV[a + 3]) -- ms
  local burst -- units; parsed only by the algorithms that use it
  local cost = tonumber(ARGV[a + 5]) -- units
  local key = KEYS[2 * i - 1]
  -- Overrides are read here, in the same atomic call, so "read override" and "apply limit" cannot race.
  -- HGETALL, not HMGET: most identities have no override, and an empty reply is the cheapest one.
  local o = redis.call("HGETALL", KEYS[2 * i])
  if o[1] then
    local override = {}
    for j = 1, #o, 2 do
      override[o[j]] = tonumber(o[j + 1])
    end
    if override.limit then
      limit = override.limit
      burst = override.burst or override.limit
    elseif override.burst then
      burst = override.burst
    end
    period = override.period or period
  end
  local period_us = period * 1000 -- µs
  if algorithm == CONCURRENCY then
    cost = 1 -- one slot per request
  end

  -- What each algorithm works out; "after" = once this request is consumed.
  local allow = false
  local avail, avail_after = 0, 0 -- units available
  local reset, reset_after = 0, 0 -- ms until fully reset
  local more, more_after = 0, 0 -- ms until more quota is available, 0 when full
  local retry = period -- ms until this request would fit
  local value, expire_us -- the write of string-state algorithms: SET key value PXAT expire
  local increment = false -- fixed-window counter of this window exists: INCRBY keeps its expiry
  -- State of another shape (the rule changed algorithm under the same name) reads as empty and is replaced:
  -- SET overwrites any type, the sorted-set algorithms delete it first. Hence pcall on the first read.
  local clear = false

  if limit <= 0 then -- an override of limit 0 blocks the identity: nothing to read
  elseif algorithm == FIXED then
    local start_ms = now_ms - now_ms % period
    local end_us = (start_ms + period) * 1000
    local used = tonumber(redis.pcall("GET", key)) or 0
    if used > 1e13 then -- no count: a µs timestamp (TAT) left by token-bucket/gcra under this rule name
      used = 0
    end
    -- A script's keys expire on the clock read when it started, TIME is read a moment later: in the first
    -- instant of a window the previous window's counter may still be visible. Its PTTL gives it away.
    if used > 0 and now_us - start_ms * 1000 < 2000 and redis.call("PTTL", key) < period / 2 then
      used = 0
    end
    allow = used + cost <= limit
    avail, avail_after = limit - used, limit - used - cost
    reset_after = ms_up(end_us - now_us)
    if used > 0 then
      reset = reset_after
    end
    more, more_after = reset, reset_after
    retry = reset_after -- the next window grants the whole limit (and cost <= limit, or it is outcome 2)
    value, expire_us, increment = tostring(used + cost), end_us, used > 0
  elseif algorithm == SLIDING then
    local window = floor(now_ms / period)
    local start_us = window * period_us
    local end_us = start_us + period_us
    local prev, cur = 0, 0
    local raw = redis.pcall("GET", key)
    if type(raw) == "string" then
      local w, p, c = string.match(raw, "^(%d+):(%d+):(%d+)$")
      w = tonumber(w)
      if w == window then
        prev, cur = tonumber(p), tonumber(c)
      elseif w == window - 1 then
        prev = tonumber(c)
      end
    end
    local in_view_us = end_us - now_us -- µs of the previous window still in view
    -- prev * in_view + (cur + cost) * period <= limit * period: exact in doubles for sane sizes.
    allow = prev * in_view_us + (cur + cost) * period_us <= limit * period_us
    local estimate = prev * in_view_us / period_us + cur
    avail = floor(limit - estimate + 1e-9)
    avail_after = floor(limit - estimate - cost + 1e-9)
    if cur > 0 then
      reset = ms_up(end_us + period_us - now_us)
    elseif prev > 0 then
      reset = ms_up(in_view_us)
    end
    reset_after = ms_up(end_us + period_us - now_us)
    if avail < limit then
      more = ms_up(sliding_wait_us(limit, period_us, start_us, prev, cur, avail + 1))
    end
    more_after = ms_up(sliding_wait_us(limit, period_us, start_us, prev, cur + cost, avail_after + 1))
    -- +1 ms: rounding the exact instant up to whole ms must never land on "still denied".
    retry = ms_up(sliding_wait_us(limit, period_us, start_us, prev, cur, cost)) + 1
    value, expire_us = window .. ":" .. prev .. ":" .. (cur + cost), end_us + period_us
  elseif algorithm == BUCKET or algorithm == GCRA then
    burst = burst or tonumber(ARGV[a + 4])
    -- One TAT (theoretical arrival time); tokens available = (now + capacity - TAT) / interval.
    local interval_us = ceil(period_us / limit) -- whole µs keep the arithmetic exact
    local capacity_us = burst * interval_us
    local tat_us = tonumber(redis.pcall("GET", key)) or 0
    if tat_us < now_us then
      tat_us = now_us
    end
    local tat_after_us = tat_us + cost * interval_us
    allow = tat_after_us - now_us <= capacity_us
    avail = floor((now_us + capacity_us - tat_us) / interval_us)
    avail_after = floor((now_us + capacity_us - tat_after_us) / interval_us)
    reset, reset_after = ms_up(tat_us - now_us), ms_up(tat_after_us - now_us)
    -- The next whole unit arrives when now + capacity - TAT reaches (avail + 1) intervals.
    if avail < burst then
      more = ms_up(tat_us - capacity_us + (avail + 1) * interval_us - now_us)
    end
    more_after = ms_up(tat_after_us - capacity_us + (avail_after + 1) * interval_us - now_us)
    retry = ms_up(tat_after_us - capacity_us - now_us)
    value, expire_us = format("%.0f", tat_after_us), tat_after_us
  elseif algorithm == LOG then
    local since = "(" .. format("%.0f", now_us - period_us) -- members newer than this are in the window
    local used = redis.pcall("ZCOUNT", key, since, "+inf")
    if type(used) ~= "number" then
      used, clear = 0, true
    end
    allow = used + cost <= limit
    avail, avail_after = limit - used, limit - used - cost
    reset_after, more_after = period, period
    if used > 0 then
      local oldest = redis.call("ZRANGEBYSCORE", key, since, "+inf", "WITHSCORES", "LIMIT", 0, 1)
      local newest = redis.call("ZREVRANGEBYSCORE", key, "+inf", since, "WITHSCORES", "LIMIT", 0, 1)
      more = ms_up(oldest[2] + period_us - now_us)
      more_after = more
      reset = ms_up(newest[2] + period_us - now_us)
    end
    if not allow and cost <= limit then
      -- The request fits once the (used + cost - limit)-th oldest unit has left the window.
      local nth = redis.call("ZRANGEBYSCORE", key, since, "+inf", "WITHSCORES", "LIMIT", used + cost - limit - 1, 1)
      retry = ms_up(nth[2] + period_us - now_us)
    end
  elseif algorithm == CONCURRENCY then
    local live = "(" .. format("%.0f", now_us) -- leases expiring after now still hold a slot
    local held = redis.pcall("ZCOUNT", key, live, "+inf")
    if type(held) ~= "number" then
      held, clear = 0, true
    end
    allow = held < limit
    avail, avail_after = limit - held, limit - held - 1
    reset_after = period
    if held > 0 then
      local last = redis.call("ZREVRANGEBYSCORE", key, "+inf", live, "WITHSCORES", "LIMIT", 0, 1)
      reset = ms_up(last[2] - now_us)
      -- Absent other traffic (no release), a slot is certain to free when the earliest lease runs out.
      local first = redis.call("ZRANGEBYSCORE", key, live, "+inf", "WITHSCORES", "LIMIT", 0, 1)
      retry = ms_up(first[2] - now_us)
    end
    -- more stays 0: a slot frees on release, which no clock can predict
  end

  local outcome = allow and 1 or 0
  local capacity = limit
  if algorithm == BUCKET or algorithm == GCRA then
    capacity = burst or tonumber(ARGV[a + 4])
  end
  if limit <= 0 or cost > capacity then
    -- More than the rule can ever grant: denied with a clear outcome, never counted, never a Lua error.
    outcome, allow, retry = 2, false, period
  end
  if not allow and ARGV[a + 6] == "1" then
    allowed = false
  end
  local at = #reply
  reply[at + 1], reply[at + 2], reply[at + 3], reply[at + 4] = outcome, limit, avail, reset
  reply[at + 5] = allow and more or retry
  if allow and not peek then
    pending[#pending + 1] = {
      at,
      key,
      cost,
      period_us,
      algorithm,
      value or false,
      expire_us or false,
      increment,
      clear,
      avail_after,
      reset_after,
      more_after,
      ARGV[a + 5],
    }
  end
end

-- Phase 2: write only if the request as a whole is allowed (a denied request consumes nothing anywhere).
if not allowed then
  reply[1] = 0
  return reply
end
for i = 1, #pending do
  local r = pending[i]
  if r[INCREMENT] then
    -- Keys cannot expire while a script runs (Redis freezes their clock), so this counter is still there.
    redis.call("INCRBY", r[KEY], r[COST_ARG])
  elseif r[VALUE] then
    -- Expiry is on Redis's own clock, which knows nothing of the test offset.
    redis.call("SET", r[KEY], r[VALUE], "PXAT", format("%.0f", ceil(r[EXPIRE_US] / 1000) - offset_ms))
  elseif r[ALGORITHM] == LOG then
    if r[CLEAR] then
      redis.call("DEL", r[KEY])
    end
    local score = format("%.0f", now_us)
    redis.call("ZREMRANGEBYSCORE", r[KEY], "-inf", format("%.0f", now_us - r[PERIOD_US]))
    local members, prefix = {}, request_id .. ":" .. score .. ":"
    for unit = 1, r[COST] do
      members[#members + 1] = score
      members[#members + 1] = prefix .. unit
      if #members >= 1000 or unit == r[COST] then -- unpack() has a stack limit
        redis.call("ZADD", r[KEY], unpack(members))
        members = {}
      end
    end
    redis.call("PEXPIREAT", r[KEY], format("%.0f", ceil((now_us + r[PERIOD_US]) / 1000) - offset_ms))
  else -- CONCURRENCY
    if r[CLEAR] then
      redis.call("DEL", r[KEY])
    end
    redis.call("ZREMRANGEBYSCORE", r[KEY], "-inf", format("%.0f", now_us))
    redis.call("ZADD", r[KEY], format("%.0f", now_us + r[PERIOD_US]), request_id)
    redis.call("PEXPIREAT", r[KEY], format("%.0f", ceil((now_us + r[PERIOD_US]) / 1000) - offset_ms))
  end
  local at = r[AT]
  reply[at + 3], reply[at + 4], reply[at + 5] = r[AVAIL_AFTER], r[RESET_AFTER], r[MORE_AFTER]
end
return reply
