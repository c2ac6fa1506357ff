--[[
decide/sliding-log.lua (algorithm code 3): exact; every unit taken in the last `period` counts.
State KEYS[i]: a ZSET with one member per written request, `<request id>:<score>#<units>`, score = time in
µs (a lease's: its end, the latest its units can be spent), and the member `total` scored -(the units of all
the others), which every write keeps exact: a decision reads the members that left the window, never one
member per unit, so its work does not grow with the cost (docs/script.md, "Sliding-log state"). A member of
the layout before, `<request id>:<score>:<unit>` (one per unit, no `total`), counts one unit. Expires one
period plus min(period, 10 s) after the last write (the furthest a lease's members can be scored ahead).
Refunds change members by name (lua/refund.lua).
Sections, spliced in by lua/decide/rules.lua:
  evaluate  phase 1: `total` and the members that left the window in one ZRANGEBYSCORE (a key without `total`:
            the window's members); the oldest member for `more`; a denial walks the oldest members to the
            one it must wait for. `value` = the units in the window once what left it is removed, `clear` =
            "left" (remove what left) or true (another algorithm's state: delete it)
  write     phase 2, allowed: ZREMRANGEBYSCORE of what left, ZADD of the request's member and `total`
  deferred  phase 2, the request denied elsewhere: the newest member's exit, what `reset` would have been
]]

--#section evaluate
local cutoff = format("%d", now_us - period_us) -- members scored at or before this have left the window
local since = "(" .. cutoff -- members newer than this are in the window
local used = 0 -- units in the window
-- `total` (scored <= 0) and every member that left the window, in one read.
local left = redis.pcall("ZRANGEBYSCORE", key, "-inf", cutoff, "WITHSCORES")
if left.err then
  clear = true -- another algorithm's state under this rule name: replaced
else
  local total -- units of every member but `total`
  for j = 1, #left, 2 do
    if left[j] == "total" then
      total = -tonumber(left[j + 1])
    else
      used = used - (tonumber(string.match(left[j], "#(%d+)$")) or 1) -- (the layout before: one unit)
      clear = "left"
    end
  end
  if total then
    used = used + total
  else
    -- No `total`: a new key, or one the layout before wrote (a script of that layout also drops `total`
    -- whenever it writes): the window's members, counted once.
    used = 0
    for _, member in ipairs(redis.call("ZRANGEBYSCORE", key, since, "+inf")) do
      used = used + (tonumber(string.match(member, "#(%d+)$")) or 1)
    end
  end
end
value = used
allow = used + cost <= limit
avail, avail_after = limit - used, limit - used - cost
reset_after, more_after = period, period
if used > 0 then
  local oldest = redis.call("ZRANGEBYSCORE", key, since, "+inf", "WITHSCORES", "LIMIT", 0, 1)
  more = ceil((oldest[2] + period_us - now_us) / 1000)
  more_after = more
  if allow and not peek and not impossible then
    deferred = true -- written after all, unless the request is denied: then phase 2 reads it
  else
    local newest = redis.call("ZREVRANGEBYSCORE", key, "+inf", since, "WITHSCORES", "LIMIT", 0, 1)
    reset = ceil((newest[2] + period_us - now_us) / 1000)
  end
end
if not allow and cost <= limit then
  -- The request fits once `need` more units have left the window: the oldest members until they hold as
  -- many (at most `need` members, each holding one unit or more).
  local need = used + cost - limit
  local oldest = redis.call("ZRANGEBYSCORE", key, since, "+inf", "WITHSCORES", "LIMIT", 0, need)
  for j = 1, #oldest, 2 do
    need = need - (tonumber(string.match(oldest[j], "#(%d+)$")) or 1)
    if need <= 0 then
      retry = ceil((oldest[j + 1] + period_us - now_us) / 1000)
      break
    end
  end
end

--#section write
if clear == true then
  redis.call("DEL", key)
elseif clear then
  redis.call("ZREMRANGEBYSCORE", key, "(0", format("%d", now_us - period_us)) -- what left (not `total`)
end
local units = lease_units[i] or tonumber(cost_arg) -- units this request (or lease) takes
local score = format("%d", now_us + (lease_life[i] or 0) * 1000) -- a lease's units: at its end
local member = request_id .. ":" .. score .. "#" .. units
redis.call("ZADD", key, score, member, format("%d", -(value + units)), "total")
-- A lease's members are scored up to min(period, LEASE_HORIZON_MS) ahead: every write keeps the key that
-- much longer than its newest member needs, so no write can cut a lease's members short.
local horizon_ms = math.min(period_us / 1000, LEASE_HORIZON_MS)
redis.call("PEXPIREAT", key, format("%d", ceil((now_us + period_us) / 1000) + horizon_ms - offset_ms))

--#section deferred
local last = redis.call("ZREVRANGEBYSCORE", key, "+inf", "(" .. format("%d", now_us - period_us), "WITHSCORES", "LIMIT", 0, 1)
local wait_us = last[2] + period_us - now_us
reply[r + 4] = wait_us > 0 and ceil(wait_us / 1000) or 0
