--[[
decide/token-bucket.lua (algorithm codes 4 token-bucket and 5 gcra: the same state, two ways to set it up):
one TAT, the theoretical arrival time; units available = (now + capacity - TAT) / interval.
  interval  ceil(period / limit) in whole µs (whole µs keep the arithmetic exact)
  capacity  burst * interval: what a fresh identity may spend at once
  delay     a request over the rate may be held up to `delay` ms for a slot reserved now (outcome 3)
State KEYS[i]: the integer TAT (µs); expires when the bucket is full (PXAT the TAT).
Sections, spliced in by lua/decide/rules.lua and lua/decide.lua:
  fast      one rule, on, no override, plain call: TIME, GET, SET; allowed: the short reply
            { remaining, reset_after_ms, retry_after_ms }; delayed: the full reply and its stamp; denied:
            the full reply; cost above burst: falls through to the general path (clock read)
  evaluate  phase 1 of the general path: `value`/`expire_us` is the TAT written in phase 2, `stamps[i]` the
            TAT written and replaced (a give-back's or split refund's proof)
]]

--#section fast
local time = redis.call("TIME")
now_us = time[1] * 1000000 + time[2] -- Lua's own string arithmetic: cheaper than two tonumber calls
now_ms = floor(now_us / 1000)
local limit, cost = tonumber(limit_arg), cost_arg == "1" and 1 or tonumber(cost_arg) -- units
local burst = tonumber(burst_arg) -- units
if limit > 0 and cost <= burst then
  local interval_us = ceil(tonumber(period_arg) * 1000 / limit) -- µs per unit
  local capacity_us = burst * interval_us
  local tat_us = tonumber(redis.pcall("GET", key)) or 0
  if tat_us < now_us then
    tat_us = now_us
  end
  local tat_after_us = tat_us + cost * interval_us
  if tat_after_us - now_us <= capacity_us then
    redis.call("SET", key, format("%d", tat_after_us), "PXAT", format("%d", ceil(tat_after_us / 1000)))
    local avail_after = floor((now_us + capacity_us - tat_after_us) / interval_us)
    local wait_us = tat_after_us - capacity_us + (avail_after + 1) * interval_us - now_us
    return { avail_after, ceil((tat_after_us - now_us) / 1000), wait_us > 0 and ceil(wait_us / 1000) or 0 }
  end
  local wait_us = tat_after_us - capacity_us - now_us -- > 0: over the rate
  local delay_us = delay_arg * 1000 -- µs
  if wait_us <= delay_us then -- delayed: the slot is reserved now, the caller waits for it
    redis.call("SET", key, format("%d", tat_after_us), "PXAT", format("%d", ceil(tat_after_us / 1000)))
    local wait_ms = ceil(wait_us / 1000)
    -- The full reply with its stamps appended (head 1 + STAMPED: the reply table in lua/decide/rules.lua).
    return { 3, 3, limit, 0, ceil((tat_after_us - now_us) / 1000), wait_ms, tat_after_us, tat_us, now_us }
  end
  wait_us = wait_us - delay_us -- a rule with a delay: when the request would fit in the queue
  return {
    0,
    0,
    limit,
    floor((now_us + capacity_us - tat_us) / interval_us),
    tat_us > now_us and ceil((tat_us - now_us) / 1000) or 0,
    wait_us > 0 and ceil(wait_us / 1000) or 0,
  }
end

--#section evaluate
local interval_us = ceil(period_us / limit) -- µs per unit
local capacity_us = burst * interval_us
local tat_us = tonumber(redis.pcall("GET", key)) or 0
if tat_us < now_us then
  tat_us = now_us
end
local tat_after_us = tat_us + cost * interval_us
local delay_us = delay_arg * 1000 -- µs a request over the rate may wait for its slot
allow = tat_after_us - now_us <= capacity_us + delay_us
delayed = allow and not impossible and tat_after_us - now_us > capacity_us
avail = floor((now_us + capacity_us - tat_us) / interval_us)
avail_after = floor((now_us + capacity_us - tat_after_us) / interval_us)
reset = tat_us > now_us and ceil((tat_us - now_us) / 1000) or 0
reset_after = ceil((tat_after_us - now_us) / 1000)
-- The next whole unit arrives when now + capacity - TAT reaches (avail + 1) intervals.
if avail < burst then
  local wait_us = tat_us - capacity_us + (avail + 1) * interval_us - now_us
  more = wait_us > 0 and ceil(wait_us / 1000) or 0
end
local wait_us = tat_after_us - capacity_us + (avail_after + 1) * interval_us - now_us
more_after = wait_us > 0 and ceil(wait_us / 1000) or 0
wait_us = tat_after_us - capacity_us - now_us
if delayed then
  retry = ceil(wait_us / 1000)
  more_after, delayed_any = retry, true -- what phase 2 reports: the wait until its slot
else
  wait_us = wait_us - delay_us -- denied with a delay: when it would fit in the queue
  retry = wait_us > 0 and ceil(wait_us / 1000) or 0
end
if allow and not impossible then
  stamps = stamps or {}
  stamps[i] = { tat_after_us, tat_us }
end
value, expire_us = format("%d", tat_after_us), tat_after_us
