--[[
decide/lease-grant.lua: a LEASE call's grant for rule i (lua/lease.lua), spliced into phase 1 of
lua/decide/rules.lua after the rule's algorithm has evaluated it. An allowing rule asked for more than this
request's cost takes up to that many units now, as if that many requests were admitted at this instant;
half of what is left at most, so that the last units of a window go one by one, centrally. Never a rule with
a delay (its give-backs and split refunds are compare-and-sets no lease may write between) nor a
concurrency/shed rule. Why no leased unit can be spent where Redis would not have admitted it, per
algorithm: docs/script.md ("Leases").
Reads: wanted_at (ARGV index of rule 1's units wanted), lease_ms, override_left, and the rule's evaluation.
Writes: lease_units[i], lease_life[i], lease_period[i], lease_tat[i]; the rule's value/expire_us and
reported figures where the lease changes what phase 2 writes.
]]

local wanted = tonumber(ARGV[wanted_at + i - 1]) -- units, this request's cost included
local leasable = delay_arg == "0" and algorithm ~= CONCURRENCY -- (a shed rule is CONCURRENCY here)
if wanted > cost and allow and leasable and not impossible then
  local life = lease_ms -- ms
  if algorithm == FIXED or algorithm == SLIDING then
    life = math.min(life, now_ms - now_ms % period + period - now_ms - 1) -- never past the window's edge
  elseif algorithm == BUCKET or algorithm == GCRA then
    -- A quarter of the bucket at most: the lease's units are recorded at its end (below), so the refill
    -- between now and then is lost to everyone; a quarter bounds that loss.
    life = math.min(life, floor(burst * ceil(period_us / limit) / 4000))
  else -- sliding-log: within the extra life every write gives the key (phase 2)
    life = math.min(life, period, LEASE_HORIZON_MS)
  end
  if override_left and override_left >= 0 then
    life = math.min(life, override_left) -- spent only under the limits it was granted under
  end
  local units = math.min(wanted, math.max(cost, floor(avail / 2)), avail)
  if life >= 10 and units > cost then
    lease_units[i], lease_life[i], lease_period[i] = units, life, period
    if algorithm == FIXED and value then -- a SET ahead (phase 1 did not count): it sets the lease's units
      value = tostring(tonumber(value) + units - cost)
    elseif algorithm == SLIDING then
      local head, c = string.match(value, "^(.*:)(%d+)$")
      value = head .. (tonumber(c) + units - cost)
    elseif algorithm == BUCKET or algorithm == GCRA then
      -- Recorded as if every unit were spent at the lease's end, the latest it can be spent.
      local interval_us = ceil(period_us / limit)
      local tat_us = math.max(tonumber(value) - cost * interval_us, now_us + life * 1000)
      expire_us = tat_us + units * interval_us
      value = format("%d", expire_us)
      lease_tat[i] = expire_us
      -- The figures it reports are the written TAT's, plus the lease's own units still to spend: never more
      -- than a client can get.
      local capacity_us = burst * interval_us
      local free = math.max(0, floor((now_us + capacity_us - expire_us) / interval_us))
      avail_after, reset_after = free + units - cost, ceil((expire_us - now_us) / 1000)
      local wait_us = expire_us - capacity_us + (free + 1) * interval_us - now_us
      more_after = wait_us > 0 and ceil(wait_us / 1000) or 0
    end
  end
end
