#!lua flags=allow-key-locking
--[[
decide: a plain decision, every rule that matches a request in one atomic call (the common call; peek,
stamps and test time travel go through lua/decide-with-options.lua, leases through lua/lease.lua).
KEYS (n rules):
  KEYS[i]          state key of rule i = 1..n  <prefix>:<rule>:{<hash>} (layout: lua/decide/<algorithm>.lua)
  KEYS[n + k]      override of the k-th rule whose mode says "with override", in rule order:
                   <prefix>:override:<rule>:{<hash>}, a hash: limit, period (ms), burst; read only
ARGV:
  ARGV[1]          request id: "" unless a sliding-log, concurrency or shed rule stores it
  ARGV[2 + 7(i-1)] rule i's group, 7 slots (the table in lua/decide/rules.lua)
Reply: the table in lua/decide/rules.lua; or, for ONE rule allowed on its algorithm's fast path (an array costs
Redis more to send, per element):
  fixed-window on a live counter              remaining, an integer  (= { 1, 1, limit, remaining, -1, -1 })
  token-bucket, gcra, sliding-window          { remaining, reset_after_ms, retry_after_ms }
Upstash bills the EVALSHA plus every command run inside it, and locks only the keys in KEYS (the shebang):
every key this script touches arrives in KEYS, TIME is read only when a rule needs the clock, an override
only for the identities the caller knows to have one (docs/script.md, "What a decision costs").
]]
--#include lib/constants

local request_id = ARGV[1] -- names what a sliding-log, concurrency or shed rule stores
local first = 2 -- ARGV index of rule 1's group
local n = (#ARGV - 1) / PER_RULE -- rules
local peek, stamped, lease = false, false, false -- the other decision scripts' options
local lease_ms, wanted_at = 0, 0 -- lua/lease.lua sets them
local offset_ms = 0 -- ms added to Redis's clock: set by lua/decide-with-options.lua, for tests
local clock = false -- read TIME whatever the rules ask
local now_us, now_ms -- µs, ms: Redis's clock, read only if a rule needs it

-- ONE rule, on, no override: its algorithm's fast path answers (the general path's values for that case
-- in fewer steps), or falls through to the general path for anything unusual (docs/script.md, "Fast paths").
if n == 1 and ARGV[first + MODE] == "1" then
  -- Rule 1's group (the table in lua/decide/rules.lua), as sent.
  local algorithm = ARGV[first + ALGORITHM] -- code (lib/constants.lua)
  local limit_arg = ARGV[first + LIMIT] -- units per period
  local period_arg = ARGV[first + PERIOD] -- ms
  local burst_arg = ARGV[first + BURST] -- units
  local cost_arg = ARGV[first + COST] -- units
  local delay_arg = ARGV[first + DELAY] -- ms
  local key = KEYS[1]
  if algorithm == FIXED and delay_arg == "0" then -- (not a calendar period: lua/decide/calendar.lua)
    --#include decide/fixed-window#fast
  elseif algorithm == BUCKET or algorithm == GCRA then
    --#include decide/token-bucket#fast
  elseif algorithm == SLIDING then
    --#include decide/sliding-window#fast
  end
end

--#include lib/override
--#include decide/rules
