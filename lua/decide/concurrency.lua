--[[
decide/concurrency.lua (algorithm codes 6 concurrency and 7 shed): requests in flight, one slot each
(`cost` does not apply). A shed rule is the same slots: the edge splits its budget over sub-keys and sets
the limit per request to its priority class's share (src/middleware/shed.ts), so no key is touched by every
request.
State KEYS[i]: a ZSET of request ids scored by their lease's expiry (µs); expired leases are dropped on
acquire; released by the request id (ZREM, src/engine/store.ts `release`, or lua/refund.lua).
Sections, spliced in by lua/decide/rules.lua:
  evaluate  phase 1: ZCOUNT of the live leases; an allowed, written rule leaves its "fully reset" to phase 2
            (`deferred`); a denial's Retry-After is when the earliest lease runs out
  write     phase 2, allowed: ZREMRANGEBYSCORE of expired leases, ZADD of this request's, PEXPIREAT
  deferred  phase 2, the request denied elsewhere: the last lease's expiry, what `reset` would have been
]]

--#section evaluate
local live = "(" .. format("%d", now_us) -- leases expiring after now still hold a slot
local held = redis.pcall("ZCOUNT", key, live, "+inf") -- slots held
if type(held) ~= "number" then
  held, clear = 0, true -- another algorithm's state under this rule name: replaced
end
allow = held < limit
avail, avail_after = limit - held, limit - held - 1
reset_after = period
if held > 0 then
  if allow and not peek then
    deferred = true -- written after all, unless the request is denied: then phase 2 reads it
  else
    local last = redis.call("ZREVRANGEBYSCORE", key, "+inf", live, "WITHSCORES", "LIMIT", 0, 1)
    reset = ceil((last[2] - now_us) / 1000)
    -- Absent other traffic (no release), a slot is certain to free when the earliest lease runs out.
    local earliest = redis.call("ZRANGEBYSCORE", key, live, "+inf", "WITHSCORES", "LIMIT", 0, 1)
    local wait_us = earliest[2] - now_us
    retry = wait_us > 0 and ceil(wait_us / 1000) or 0
  end
end
-- more stays 0: a slot frees on release, which no clock can predict

--#section write
if clear then
  redis.call("DEL", key)
end
redis.call("ZREMRANGEBYSCORE", key, "-inf", format("%d", now_us))
redis.call("ZADD", key, format("%d", now_us + period_us), request_id)
redis.call("PEXPIREAT", key, format("%d", ceil((now_us + period_us) / 1000) - offset_ms))

--#section deferred
local last = redis.call("ZREVRANGEBYSCORE", key, "+inf", "(" .. format("%d", now_us), "WITHSCORES", "LIMIT", 0, 1)
local wait_us = last[2] - now_us
reply[r + 4] = wait_us > 0 and ceil(wait_us / 1000) or 0
