--[[
decide/calendar.lua: a fixed-window rule over calendar periods (a day, week or month of a time zone:
docs/counting.md, "Calendar periods"). The edge cannot know which period Redis's clock is in near a boundary,
so it sends the boundaries around its own clock in the rule's delay slot (a window rule has no delay; a slot
with a ":" is a calendar period's): "<previous start>:<start>:<end>:<next end>", ms since the epoch. The script takes the
period Redis's now falls in: [previous start, start), [start, end) or [end, next end); outside them all it
answers an error (the edge's clock a whole period off), never a guess.
State KEYS[i]: an integer counter that expires AT its period's end (PEXPIREAT). A counter whose expiry is not
the chosen period's end (within REAIM_SLACK_MS) is another period's, or from before a change of the rule's
zone or anchor: it counts nothing here and is replaced. So the counter a decision counts on is this period's.
Sections, spliced in by lua/decide/rules.lua and lua/refund.lua:
  period    sets the caller's locals start_ms, end_ms (ms) from the slot `delay_arg` and Redis's `now_ms`,
            and `period` to their span
  evaluate  phase 1 of the general path, as in decide/fixed-window.lua, on these bounds
]]

--#section period
local previous_ms, next_ms -- ms
previous_ms, start_ms, end_ms, next_ms = string.match(delay_arg, "^(%d+):(%d+):(%d+):(%d+)$")
previous_ms, start_ms, end_ms, next_ms =
  tonumber(previous_ms), tonumber(start_ms), tonumber(end_ms), tonumber(next_ms)
if not next_ms then
  return redis.error_reply("ERR calendar bounds expected as previous:start:end:next ms, got " .. delay_arg)
end
if now_ms < start_ms then
  start_ms, end_ms = previous_ms, start_ms
elseif now_ms >= end_ms then
  start_ms, end_ms = end_ms, next_ms
end
if now_ms < start_ms or now_ms >= end_ms then
  return redis.error_reply("ERR the calendar bounds sent do not hold Redis's clock")
end
period = end_ms - start_ms -- ms: this period's length

--#section evaluate
local used -- units counted before this request
local until_end = end_ms - now_ms -- ms
if not peek and not impossible then
  -- Optimistic: count first (lib/counter.lua), take back below if this rule denies (as decide/fixed-window.lua).
  local counting
  used, counting = count_first(key, cost_arg, cost)
  if not counting then -- a TAT (used 0: SET replaces it) or another type (used nil: read below)
  elseif used == 0 then
    redis.call("PEXPIREAT", key, format("%d", end_ms - offset_ms))
    undo = "del"
  elseif math.abs(redis.call("PTTL", key) - until_end) > REAIM_SLACK_MS then
    -- Another period's counter: take the increment back and start this period's with SET in phase 2.
    redis.call("DECRBY", key, cost_arg)
    used = 0
  else
    undo = "decr"
  end
end
if not used then
  -- Read only (peek, cost over capacity, another algorithm's state).
  used = tonumber(redis.pcall("GET", key)) or 0
  if used > 1e13 or used > 0 and math.abs(redis.call("PTTL", key) - until_end) > REAIM_SLACK_MS then
    used = 0 -- a TAT, or another period's counter
  end
end
allow = used + cost <= limit
avail, avail_after = limit - used, limit - used - cost
reset_after = ceil((end_ms * 1000 - now_us) / 1000)
if used > 0 then
  reset = reset_after
end
more, more_after = reset, reset_after
retry = reset_after -- the next period grants the whole limit
if not undo then
  value, expire_us = tostring(used + cost), end_ms * 1000
end
