--[[
decide/sliding-log.lua (algorithm code 3): exact; every unit taken in the last `period` is a member.
State KEYS[i]: a ZSET, one member per unit, `<request id>:<score>:<unit>`, score = time in µs (a lease's
units: the lease's end, the latest they can be spent); expires one period plus min(period, 10 s) after the
last write (the furthest a lease's members can be scored ahead). Refunds remove members by name
(lua/refund.lua).
Sections, spliced in by lua/decide/rules.lua:
  evaluate  phase 1: ZCOUNT of the window (+ the oldest member for `more`); an allowed, written rule leaves
            its "fully reset" to phase 2 (`deferred`), a denial asks for the member it must wait for
  write     phase 2, allowed: ZREMRANGEBYSCORE of what left the window, ZADD of the units, PEXPIREAT
  deferred  phase 2, the request denied elsewhere: the newest member's exit, what `reset` would have been
]]

--#section evaluate
local since = "(" .. format("%d", now_us - period_us) -- members newer than this are in the window
local used = redis.pcall("ZCOUNT", key, since, "+inf") -- units in the window
if type(used) ~= "number" then
  used, clear = 0, true -- another algorithm's state under this rule name: replaced
end
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
  -- The request fits once the (used + cost - limit)-th oldest unit has left the window.
  local nth = redis.call("ZRANGEBYSCORE", key, since, "+inf", "WITHSCORES", "LIMIT", used + cost - limit - 1, 1)
  retry = ceil((nth[2] + period_us - now_us) / 1000)
end

--#section write
if clear then
  redis.call("DEL", key)
end
local score = format("%d", now_us + (lease_life[i] or 0) * 1000) -- a lease's units: at its end
redis.call("ZREMRANGEBYSCORE", key, "-inf", format("%d", now_us - period_us))
local units = lease_units[i] or tonumber(cost_arg) -- members to add
local members, prefix = {}, request_id .. ":" .. score .. ":"
for unit = 1, units do
  members[#members + 1] = score
  members[#members + 1] = prefix .. unit
  if #members >= 1000 or unit == units then -- unpack() has a stack limit
    redis.call("ZADD", key, unpack(members))
    members = {}
  end
end
-- A lease's members are scored up to min(period, LEASE_HORIZON_MS) ahead: every write keeps the key that
-- much longer than its newest member needs, so no write can cut a lease's members short.
local horizon_ms = math.min(period_us / 1000, LEASE_HORIZON_MS)
redis.call("PEXPIREAT", key, format("%d", ceil((now_us + period_us) / 1000) + horizon_ms - offset_ms))

--#section deferred
local last = redis.call("ZREVRANGEBYSCORE", key, "+inf", "(" .. format("%d", now_us - period_us), "WITHSCORES", "LIMIT", 0, 1)
local wait_us = last[2] + period_us - now_us
reply[r + 4] = wait_us > 0 and ceil(wait_us / 1000) or 0
