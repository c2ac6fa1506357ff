#!lua flags=allow-key-locking
--[[
settle: the units a response said a request really cost beyond what its admission charged, charged now
(a rule's `settle`: src/middleware/settle.ts). Units a response says were NOT spent go back through
lua/refund.lua instead, which proves what it gives back. A charge is never refused: it may push the state
past the limit, and the identity is then denied by its decisions until that debt is repaid (what "debt" is
per algorithm, and the bound on what a window can admit: docs/settle.md).
KEYS (n rules):
  KEYS[i]           state key of rule i = 1..n  <prefix>:<rule>:{<hash>} (layout: lua/decide/<algorithm>.lua)
ARGV (5 per rule):
  ARGV[1 + 5(i-1)]  algorithm code: 1 fixed-window | 2 sliding-window | 4 token-bucket | 5 gcra
  ARGV[2 + 5(i-1)]  limit in force at the decision, units per period
  ARGV[3 + 5(i-1)]  period in force at the decision, ms; 0 for a calendar period (fixed-window)
  ARGV[4 + 5(i-1)]  burst in force at the decision, units (token-bucket/gcra capacity; ignored by windows)
  ARGV[5 + 5(i-1)]  units to charge, >= 1
Reply: { remaining } per rule, in rule order: units available after the charge, negative = the debt.
]]
--#include lib/constants
--#include lib/sliding-state

local SLOTS = 5 -- ARGV slots per rule
local n = #ARGV / SLOTS -- rules
local now_us -- µs, Redis's clock: read once, only where a rule needs it
local function clock()
  if not now_us then
    local time = redis.call("TIME")
    now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
  end
  return now_us
end

local reply = {}
for i = 1, n do
  local at = 1 + (i - 1) * SLOTS
  local algorithm = ARGV[at] -- code (lib/constants.lua)
  local limit = tonumber(ARGV[at + 1]) -- units per period
  local period = tonumber(ARGV[at + 2]) -- ms
  local burst = tonumber(ARGV[at + 3]) -- units
  local units_arg = ARGV[at + 4] -- units, as sent (INCRBY takes the string)
  local units = tonumber(units_arg) -- units
  local key = KEYS[i]
  local remaining = 0
  if algorithm == FIXED then
    -- The window the charge lands in is the current one: a response that ends after its window did is charged
    -- to the next (the debt is known only now). A counter that did not exist gets its window's end as expiry.
    local counted = redis.pcall("INCRBY", key, units_arg)
    if type(counted) == "number" then
      if counted == units and period == 0 then
        -- A calendar period's counter that did not exist: its period ended since the admission, and where the
        -- new one ends only the decision's bounds say. Not charged (the debt of a response that outlived its
        -- period is forgiven: docs/settle.md).
        redis.call("DEL", key)
        counted = 0
      elseif counted == units then
        local now_ms = floor(clock() / 1000)
        redis.call("PEXPIREAT", key, format("%d", now_ms - now_ms % period + period))
      end
      remaining = limit - counted
    end
  elseif algorithm == SLIDING then
    -- The current window's count grows; the previous window's share of the estimate is kept.
    local period_us = period * 1000 -- µs
    local now = clock()
    local window = floor(now / period_us)
    local prev, cur, same = read_sliding(key, window)
    if same then
      redis.call("SET", key, same .. (cur + units), "KEEPTTL")
    else
      local expire_ms = format("%d", ceil((window + 2) * period_us / 1000))
      redis.call("SET", key, format("%d:%d:%d", window, prev, cur + units), "PXAT", expire_ms)
    end
    local in_view_us = (window + 1) * period_us - now -- µs of the previous window still in view
    remaining = floor(limit - prev * in_view_us / period_us - cur - units + 1e-9)
  elseif algorithm == BUCKET or algorithm == GCRA then
    -- The TAT moves forward by the units' emission intervals (from now, if the bucket has refilled past it).
    local interval_us = ceil(period * 1000 / limit) -- µs per unit
    local now = clock()
    local tat_us = tonumber(redis.pcall("GET", key)) or 0
    if tat_us < now then
      tat_us = now
    end
    tat_us = tat_us + units * interval_us
    redis.call("SET", key, format("%d", tat_us), "PXAT", format("%d", ceil(tat_us / 1000)))
    remaining = floor((now + burst * interval_us - tat_us) / interval_us)
  end
  reply[i] = remaining
end
return reply
