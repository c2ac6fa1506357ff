--[[
decide/sliding-window.lua (algorithm code 2): the weighted two-counter estimate,
prev * (share of the previous window still in view) + cur, against the limit.
State KEYS[i]: the string "window:prev:cur" (window = floor(now / period)); lives until the next window
ends (a write within the same window keeps the expiry the window's first write set, KEEPTTL).
Sections, spliced in by lua/decide/rules.lua and lua/decide.lua:
  fast      one rule, on, no override, plain call, allowed: TIME, GET, SET; answers the short reply
            { remaining, reset_after_ms, retry_after_ms }; a denial goes on to the general path (clock read)
  evaluate  phase 1 of the general path: `value`/`expire_us` ("keep": KEEPTTL) is the write for phase 2
The state is read by lib/sliding-state.lua's read_sliding (lua/settle.lua reads it the same way).
Retry-After can exceed one period: a request that fits only in the next window waits for the previous
window's share to shrink.
]]

--#section fast
--#include lib/sliding-state
local time = redis.call("TIME")
now_us = time[1] * 1000000 + time[2] -- Lua's own string arithmetic: cheaper than two tonumber calls
now_ms = floor(now_us / 1000)
local limit, cost = tonumber(limit_arg), cost_arg == "1" and 1 or tonumber(cost_arg) -- units
if limit > 0 and cost <= limit then
  local period = tonumber(period_arg) -- ms
  local period_us = period * 1000 -- µs
  local window = floor(now_ms / period)
  local start_us = window * period_us
  local end_us = start_us + period_us
  local prev, cur, same = read_sliding(key, window)
  local in_view_us = end_us - now_us -- µs of the previous window still in view
  if prev * in_view_us + (cur + cost) * period_us <= limit * period_us then
    if same then
      redis.call("SET", key, same .. (cur + cost), "KEEPTTL")
    else
      local expire_ms = format("%d", ceil((end_us + period_us) / 1000))
      redis.call("SET", key, format("%d:%d:%d", window, prev, cur + cost), "PXAT", expire_ms)
    end
    local c = cur + cost
    local avail_after = floor(limit - prev * in_view_us / period_us - c + 1e-9)
    local need, wait_us = avail_after + 1, 0 -- µs until one more unit fits
    if c + need <= limit then
      if prev > 0 then
        wait_us = start_us + period_us * (1 - (limit - need - c) / prev) - now_us
      end
    else
      wait_us = end_us + period_us * (1 - (limit - need) / c) - now_us
    end
    return { avail_after, ceil((end_us + period_us - now_us) / 1000), wait_us > 0 and ceil(wait_us / 1000) or 0 }
  end
end

--#section evaluate
local window = floor(now_ms / period)
local start_us = window * period_us
local end_us = start_us + period_us
-- same: "window:prev:" as stored, when the state is of this window: reused, not re-formatted
local prev, cur, same = read_sliding(key, window)
local in_view_us = end_us - now_us -- µs of the previous window still in view
-- prev * in_view + (cur + cost) * period <= limit * period: exact in doubles for sane sizes.
allow = prev * in_view_us + (cur + cost) * period_us <= limit * period_us
local estimate = prev * in_view_us / period_us + cur
avail = floor(limit - estimate + 1e-9)
avail_after = floor(limit - estimate - cost + 1e-9)
if cur > 0 then
  reset = ceil((end_us + period_us - now_us) / 1000)
elseif prev > 0 then
  reset = ceil(in_view_us / 1000)
end
reset_after = ceil((end_us + period_us - now_us) / 1000)
-- µs until prev * (share of the previous window still in view) + c + need <= limit, three times
-- (k = 1: more now, 2: more after this request, 3: this request), unrolled in a loop, not a function.
for k = avail < limit and 1 or 2, 3 do
  local c, need = cur, cost
  if k == 1 then
    need = avail + 1
  elseif k == 2 then
    c, need = cur + cost, avail_after + 1
  end
  local wait_us = 0
  if c + need <= limit then
    if prev > 0 then
      -- prev * (period - e) / period <= limit - need - c, solved for e (µs into the current window)
      wait_us = start_us + period_us * (1 - (limit - need - c) / prev) - now_us
    end
  else -- only the next window can fit it: there c becomes prev
    wait_us = start_us + period_us + period_us * (1 - (limit - need) / c) - now_us
  end
  wait_us = wait_us > 0 and ceil(wait_us / 1000) or 0
  if k == 1 then
    more = wait_us
  elseif k == 2 then
    more_after = wait_us
  else
    -- +1 ms: rounding the exact instant up to whole ms must never land on "still denied".
    retry = wait_us + 1
  end
end
-- The state of this window already expires where this write would make it expire (the end of the next
-- window): SET keeps that expiry (KEEPTTL), which costs Redis half as much as setting it again.
if same then
  value, expire_us = same .. (cur + cost), "keep"
else
  value, expire_us = format("%d:%d:%d", window, prev, cur + cost), end_us + period_us
end
