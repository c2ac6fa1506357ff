--[[
decide/fixed-window.lua (algorithm code 1): a counter per epoch-aligned window of `period`.
State KEYS[i]: an integer counter that expires AT its window's end on Redis's clock (PEXPIREAT), so a
counter the script can see IS the current window's: a live counter needs no clock (docs/script.md, "Time").
Sections, spliced in by lua/decide/rules.lua and lua/decide.lua:
  fast      one rule, on, no override, plain call: INCRBY (+ TIME and PEXPIREAT for a new counter); answers
            the short reply `remaining` (an integer) when allowed on a live counter, else the full reply;
            returns nothing (falls through to the general path) for anything unusual
  evaluate  phase 1 of the general path: counts at once (INCRBY), `undo` takes it back if the rule or the
            request is denied; `value`/`expire_us` only for a counter SET in phase 2 (peek, a stale counter)
Both count with lib/counter.lua's count_first (a token-bucket/gcra TAT under this rule name is no count).
Reply values: reset_after and retry_after -1 when allowed without the clock: "the current window's end",
which the caller works out (src/engine/reply.ts).
]]

--#section fast
--#include lib/counter
local limit, cost = tonumber(limit_arg), tonumber(cost_arg) -- units
if limit > 0 and cost <= limit then
  local used, counting = count_first(key, cost_arg, cost)
  if counting then -- (not: a token-bucket/gcra TAT or another type, which the general path replaces)
    local counted = used + cost
    if used == 0 then -- a new counter: its expiry is its window's end, on Redis's clock
      local time = redis.call("TIME")
      local now = tonumber(time[1]) * 1000 + floor(tonumber(time[2]) / 1000) -- ms
      local period = tonumber(period_arg) -- ms
      local end_ms = now - now % period + period -- ms
      redis.call("PEXPIREAT", key, format("%d", end_ms))
      local reset_after = ceil(end_ms - (tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000)) -- ms
      return { 1, 1, limit, limit - cost, reset_after, reset_after }
    elseif counted <= limit then
      return limit - counted -- the short reply
    end
    redis.call("DECRBY", key, cost_arg) -- denied: nothing counted, Retry-After on Redis's clock
    local reset = redis.call("PTTL", key) -- ms
    return { 0, 0, limit, limit - used, reset, reset }
  end
end

--#section evaluate
local used -- units counted before this request
if not peek and not impossible then
  -- Optimistic: count first (lib/counter.lua), take back below if this rule denies.
  local counting
  used, counting = count_first(key, cost_arg, cost)
  if not counting then -- a TAT (used 0: SET replaces it) or another type (used nil: read below)
  elseif used == 0 then
    -- A new counter: it must never exist without its expiry, so it gets it at once, on Redis's clock.
    if not now_us then
      local time = redis.call("TIME")
      now_us = tonumber(time[1]) * 1000000 + tonumber(time[2]) + offset_ms * 1000
      now_ms = floor(now_us / 1000)
    end
    redis.call("PEXPIREAT", key, format("%d", now_ms - now_ms % period + period - offset_ms))
    undo = "del"
  elseif now_us and now_us % period_us < 2000 and redis.call("PTTL", key) < period / 2 then
    -- With the clock read (TIME comes a moment after the instant the script's keys expire at), in the
    -- first instant of a window the previous window's counter may still be visible. Its PTTL gives it
    -- away: take the increment back and start this window's counter with SET in phase 2.
    redis.call("DECRBY", key, cost_arg)
    used = 0
  else
    undo = "decr"
    if overridable then
      -- Created under another period, maybe (an override set, removed or ended by its ttl since):
      -- re-aimed at the end of the window in force, its count kept (docs/script.md, "Time").
      local until_end = period - now_ms % period -- ms
      if math.abs(redis.call("PTTL", key) - until_end) > REAIM_SLACK_MS then
        redis.call("PEXPIREAT", key, format("%d", now_ms + until_end - offset_ms))
      end
    end
  end
end
if not used or not undo and not now_us then
  -- Peek, cost over capacity, another algorithm's state, or a SET ahead: those work from the clock.
  if not now_us then
    local time = redis.call("TIME")
    now_us = tonumber(time[1]) * 1000000 + tonumber(time[2]) + offset_ms * 1000
    now_ms = floor(now_us / 1000)
  end
end
if not used then
  -- Read only.
  used = tonumber(redis.pcall("GET", key)) or 0
  if used > 1e13 then -- no count: a µs timestamp (TAT) left by token-bucket/gcra under this rule name
    used = 0
  end
  if used > 0 and now_us % period_us < 2000 and redis.call("PTTL", key) < period / 2 then
    used = 0 -- the previous window's counter, see above
  end
end
allow = used + cost <= limit
avail, avail_after = limit - used, limit - used - cost
if now_us then
  reset_after = ceil(((now_ms - now_ms % period + period) * 1000 - now_us) / 1000)
elseif allow then
  reset_after = -1 -- the end of the current window, worked out by the caller
else
  reset_after = redis.call("PTTL", key) -- a denial answers on Redis's clock
end
if used > 0 then
  reset = reset_after
end
more, more_after = reset, reset_after
retry = reset_after -- the next window grants the whole limit (and cost <= limit, or it is outcome 2)
if not undo then
  value, expire_us = tostring(used + cost), (now_ms - now_ms % period + period) * 1000
end
