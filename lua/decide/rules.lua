--[[
decide/rules.lua: the general path of a decision, all of a request's rules in one atomic call. Included by
lua/decide.lua, lua/decide-with-options.lua and lua/lease.lua, after their named locals (request_id, first,
n, peek, stamped, lease, lease_ms, offset_ms, clock, now_us, now_ms).
Rule i's group, 7 slots from ARGV[first + 7(i-1)] (offsets in lib/constants.lua):
  +0 algorithm  1 fixed-window | 2 sliding-window | 3 sliding-log | 4 token-bucket | 5 gcra | 6 concurrency
                | 7 shed (lua/decide/<algorithm>.lua)
  +1 mode       1 on (can deny) | 0 monitor (reported, never denies); 3 | 2: the same, and the rule's
                override key follows the state keys (KEYS[n + k] for the k-th such rule); "<mode>:<ms>"
                (on only): a denial blocks the identity for <ms> (the rule's `block`), and the rule's block
                key <prefix>:<rule>:{<hash>}:block follows its override key (or takes its place)
  +2 limit      units per period (concurrency: requests in flight), tier already applied by the edge
  +3 period     ms (concurrency: the lease after which an unreleased slot is freed)
  +4 burst      units: token-bucket capacity / gcra burst
  +5 cost       units this request consumes, >= 1 (concurrency: one slot whatever it says)
  +6 delay      ms a token-bucket/gcra request over the rate may be held for its slot; "0" = deny;
                fixed-window: a calendar period's bounds (lua/decide/calendar.lua) when it holds a ":"
Reply: { head, then 5 per rule, then the appendices the head names, in this order }
  [1]          head: 1 if every `on` rule allows (and then every allowing rule was written), else 0;
               + 2 (STAMPED) when the stamps follow, + 4 (PERIODS) when the periods follow
  [2 + 5(i-1)] outcome: 0 denied | 1 allowed | 2 cost exceeds what the rule can ever grant | 3 delayed
               | 4 denied by the identity's standing block | 5 denied, and this denial started a block
               (4 and 5: remaining 0, reset_after_ms and retry_after_ms the block's end)
  [3 + 5(i-1)] limit in force (after override)
  [4 + 5(i-1)] remaining: units available after this call (after consumption if written, else as now)
  [5 + 5(i-1)] reset_after_ms: until fully reset (window end, bucket full); 0 when untouched
  [6 + 5(i-1)] retry_after_ms: denied: when the same request would fit absent other traffic; allowed:
               until more quota is available, 0 when full; delayed: the wait until its slot
  lease        a LEASE call only (lua/lease.lua): { units, life_ms, tat_us, period_ms } per rule, then now_us
  STAMPED      3 per rule: the TAT written, the TAT replaced, Redis's clock then (µs); 0s for a rule that
               is not a bucket or was not written (a give-back's and a split refund's proof)
  PERIODS      1 per rule: the period in force (ms), negative where an override applied; sent when an
               override applied or a rule is a calendar period
  -1 in reset_after/retry_after of a fixed window allowed without the clock: "the window's end".
Semantics (docs/script.md): phase 1 evaluates every rule without writing (a fixed-window counter excepted:
counted at once, taken back on denial); phase 2 writes each ALLOWING rule only if every `on` rule allows.
]]

--#include lib/counter
--#include lib/sliding-state

local STAMPED, PERIODS = 2, 4 -- the head's flags
local BLOCKED, BLOCK_STARTED = 4, 5 -- outcomes of a rule with a block (the reply table above)
-- Every algorithm code (lib/constants.lua; src/engine/algorithms.ts holds the same, and a test compares them).
local KNOWN = { [FIXED] = true, [SLIDING] = true, [LOG] = true, [BUCKET] = true, [GCRA] = true,
  [CONCURRENCY] = true, [SHED] = true }

for i = 1, n do
  local at = first + (i - 1) * PER_RULE
  local algorithm, mode = ARGV[at + ALGORITHM], ARGV[at + MODE]
  if #mode > 1 then
    mode = sub(mode, 1, 1) -- "<mode>:<block ms>": a block needs no clock (its key expires by PX)
  end
  if algorithm ~= FIXED or mode == "3" or mode == "2" or string.find(ARGV[at + DELAY], ":", 1, true) then
    clock = true -- every other algorithm works from now; an override may change the period; a calendar
    -- period is chosen by it
  end
  if not KNOWN[algorithm] then
    -- A code this script does not know: an error before anything is written, never a silent verdict.
    return redis.error_reply("ERR unknown algorithm code " .. tostring(algorithm))
  end
end
if clock and not now_us then
  local time = redis.call("TIME")
  now_us = tonumber(time[1]) * 1000000 + tonumber(time[2]) + offset_ms * 1000
  now_ms = floor(now_us / 1000)
end
-- (Lua numbers given to redis.call are formatted by Redis, which costs more than passing strings.)

-- Phase 1: evaluate every rule. The reply gets each rule's values as things stand now; an allowing rule also
-- leaves its write, and its values after that write, for phase 2: the first such rule in locals (with one
-- rule, no table at all), any further one as an array in `more_pending` (the locals' order).
local reply = n == 1 and { 1, 0, 0, 0, 0, 0 } or { 1 } -- sized at once for the common single rule
-- Leases granted by this call (lua/lease.lua): rule index -> units (this request's cost included), life ms,
-- the period in force (ms), and for token-bucket/gcra the TAT written (µs).
local lease_units, lease_life, lease_period, lease_tat = {}, {}, {}, {}
local p_i, p_algorithm, p_cost_arg, p_period_us, p_value, p_expire_us, p_clear
local p_avail_after, p_reset_after, p_more_after, p_undo
local more_pending
local stamps -- rule index -> { TAT written, TAT replaced } of token-bucket/gcra rules
local delayed_any = false
local periods -- rule index -> the period in force, where an override applied (the PERIODS appendix)
local calendars -- rule index -> the calendar period's length, ms (the PERIODS appendix too)
local allowed = true
local override_at = n -- KEYS index of the last override key used
for i = 1, n do
  -- Rule i's group (the table above).
  local at = first + (i - 1) * PER_RULE
  local algorithm = ARGV[at + ALGORITHM] -- code (lib/constants.lua)
  local mode = ARGV[at + MODE] -- 1 | 0; 3 | 2 with an override key; "<that>:<ms>" with a block key too
  local block_ms -- ms a denial by this rule blocks the identity for; nil: the rule has no block (or is monitor)
  if #mode > 1 then
    block_ms = sub(mode, 3)
    mode = sub(mode, 1, 1)
  end
  local limit = tonumber(ARGV[at + LIMIT]) -- units per period
  local period = tonumber(ARGV[at + PERIOD]) -- ms
  local burst_arg = ARGV[at + BURST] -- units, parsed only by the buckets
  local cost_arg = ARGV[at + COST] -- units, as sent
  local delay_arg = ARGV[at + DELAY] -- ms, as sent
  local cost = cost_arg == "1" and 1 or tonumber(cost_arg) -- units
  local burst -- units; the buckets' only
  local key = KEYS[i]
  local overridable = mode == "3" or mode == "2" -- the override key was sent
  local override_left -- ms the override in force has left (a lease never outlives it); -1: no ttl
  if overridable then
    -- Read here, in the same atomic call, so "read override" and "apply limit" cannot race.
    override_at = override_at + 1
    local exists, o_limit, o_period, o_burst = read_override(KEYS[override_at])
    if exists then
      if lease then
        override_left = redis.call("PTTL", KEYS[override_at])
      end
      if o_limit then
        limit = o_limit
        burst = o_burst or o_limit
      elseif o_burst then
        burst = o_burst
      end
      period = o_period or period
      periods = periods or {}
      periods[i] = period
    end
  end
  -- Over calendar periods: the bounds in the delay slot (a window rule has no delay of its own).
  local calendar = algorithm == FIXED and delay_arg ~= "0" and string.find(delay_arg, ":", 1, true)
  local start_ms, end_ms -- ms: a calendar period's bounds
  if calendar then
    -- Its period is Redis's now's among the bounds sent; an override's period does not apply.
    --#include decide/calendar#period
    calendars = calendars or {}
    calendars[i] = period
  end
  local block_key -- <prefix>:<rule>:{<hash>}:block, "1" while the identity is blocked (PX = the block)
  local blocked_ms -- ms the identity's standing block has left; nil: none stands
  if block_ms then
    override_at = override_at + 1 -- the block key follows the rule's override key
    block_key = KEYS[override_at]
    local left = redis.call("PTTL", block_key) -- -2: no block
    if left > 0 then
      blocked_ms = left
    end
  end
  local period_us = period * 1000 -- µs
  if algorithm == SHED then
    algorithm = CONCURRENCY -- the same slots; only the edge's limit (the class's share) differs
  end
  if algorithm == CONCURRENCY then
    cost = 1 -- one slot per request
  end
  local capacity = limit
  if algorithm == BUCKET or algorithm == GCRA then
    burst = burst or tonumber(burst_arg)
    capacity = burst
  end
  -- More than the rule can ever grant: denied with a clear outcome, never counted, never a Lua error.
  local impossible = limit <= 0 or cost > capacity

  -- What each algorithm works out; "after" = once this request is consumed.
  local allow = false
  local avail, avail_after = 0, 0 -- units available
  local reset, reset_after = 0, 0 -- ms until fully reset
  local more, more_after = 0, 0 -- ms until more quota is available, 0 when full
  local retry = period -- ms until this request would fit
  local value, expire_us -- the write of string-state algorithms: SET key value PXAT expire (sliding-log: its own)
  -- State of another shape (the rule changed algorithm under the same name) reads as empty and is replaced:
  -- SET overwrites any type, the sorted-set algorithms delete it first (`clear`). Hence pcall on the first read.
  local clear = false
  -- Set when phase 1 already wrote (fixed window): "del" (it created the counter) or "decr" takes it back.
  local undo = false
  -- Sorted sets: the "now" reset is only worth a command if the rule is not going to be written.
  local deferred = false
  local delayed = false -- token-bucket/gcra with a delay: allowed from a reserved slot, `retry` ms from now

  if blocked_ms then -- the block denies whatever the rate says: nothing to read
  elseif limit <= 0 then -- an override of limit 0 blocks the identity: nothing to read
  elseif calendar then
    --#include decide/calendar#evaluate
  elseif algorithm == FIXED then
    --#include decide/fixed-window#evaluate
  elseif algorithm == SLIDING then
    --#include decide/sliding-window#evaluate
  elseif algorithm == BUCKET or algorithm == GCRA then
    --#include decide/token-bucket#evaluate
  elseif algorithm == LOG then
    --#include decide/sliding-log#evaluate
  elseif algorithm == CONCURRENCY then
    --#include decide/concurrency#evaluate
  end

  if lease then
    --#include decide/lease-grant
  end
  local outcome = delayed and 3 or allow and 1 or 0
  if blocked_ms then
    -- Denied until the block ends; a denial now does not extend it (docs/protect.md, "Penalty box").
    outcome, reset, retry = BLOCKED, blocked_ms, blocked_ms
  elseif impossible then
    -- No wait lets this request in: the rule reports, as for an allowed request, when more quota is available
    -- (0 when full); the caller's Retry-After is one full period. A limit of 0 never frees any: one period.
    outcome, allow, retry = 2, false, limit > 0 and more or period
  elseif block_ms and outcome == 0 and not peek then
    -- The rate denied the identity: it stays denied for the block, from now, whatever its rate does.
    redis.call("SET", block_key, "1", "PX", block_ms)
    block_ms = tonumber(block_ms)
    outcome, reset, retry = BLOCK_STARTED, math.max(reset, block_ms), block_ms
  end
  if not allow and (mode == "1" or mode == "3") then
    allowed = false
  end
  if undo and not allow then
    -- This rule denies (a monitor rule that would deny is not written either): take the count back.
    if undo == "del" then
      redis.call("DEL", key)
    else
      redis.call("DECRBY", key, cost_arg)
    end
  end
  local r = 1 + (i - 1) * 5 -- the rule's reply group follows this index
  reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4] = outcome, limit, avail, reset
  reply[r + 5] = allow and not delayed and more or retry
  if allow and not peek then
    if not p_i then
      p_i, p_algorithm, p_cost_arg, p_period_us = i, algorithm, cost_arg, period_us
      p_value, p_expire_us, p_clear = value or false, expire_us or false, clear
      p_avail_after, p_reset_after, p_more_after, p_undo = avail_after, reset_after, more_after, undo or deferred
    else
      more_pending = more_pending or {}
      more_pending[#more_pending + 1] = {
        i,
        algorithm,
        cost_arg,
        period_us,
        value or false,
        expire_us or false,
        clear,
        avail_after,
        reset_after,
        more_after,
        undo or deferred,
      }
    end
  end
end

-- Phase 2: write only if the request as a whole is allowed (a denied request consumes nothing anywhere).
if not allowed then
  reply[1] = 0
end
for k = 0, more_pending and #more_pending or 0 do
  if not p_i then
    break
  end
  local i, algorithm, cost_arg, period_us, value, expire_us, clear, avail_after, reset_after, more_after, undo =
    p_i, p_algorithm, p_cost_arg, p_period_us, p_value, p_expire_us, p_clear, p_avail_after, p_reset_after,
    p_more_after, p_undo
  if k > 0 then
    i, algorithm, cost_arg, period_us, value, expire_us, clear, avail_after, reset_after, more_after, undo =
      unpack(more_pending[k])
  end
  local key = KEYS[i]
  local r = 1 + (i - 1) * 5
  if not allowed then
    if undo == "del" then
      redis.call("DEL", key)
    elseif undo == "decr" then
      redis.call("DECRBY", key, cost_arg)
    elseif undo and algorithm == LOG then -- a sorted set whose "now" reset phase 1 left for here
      --#include decide/sliding-log#deferred
    elseif undo then
      --#include decide/concurrency#deferred
    end
  else
    if algorithm == LOG then
      --#include decide/sliding-log#write
    elseif algorithm == CONCURRENCY then
      --#include decide/concurrency#write
    elseif expire_us == "keep" then
      redis.call("SET", key, value, "KEEPTTL")
    elseif value then
      -- Expiry is on Redis's own clock, which knows nothing of the test offset.
      redis.call("SET", key, value, "PXAT", format("%d", ceil(expire_us / 1000) - offset_ms))
      if lease_tat[i] and #KEYS > override_at then -- a bucket's lease: its lease mark, if sent (lua/lease.lua)
        redis.call("SET", KEYS[#KEYS - n + i], format("%d", now_us), "PX", STAMP_HORIZON_MS)
      end
    elseif lease_units[i] then -- a fixed-window counter phase 1 incremented by the cost: now the rest
      redis.call("INCRBY", key, lease_units[i] - tonumber(cost_arg))
    end
    reply[r + 3], reply[r + 4], reply[r + 5] = avail_after, reset_after, more_after
  end
end
if lease then -- after the groups: units, life, TAT and period of each rule's lease (0 = none), then Redis's now
  local at = 1 + 5 * n
  for i = 1, n do
    local granted = allowed and lease_units[i]
    reply[at + 4 * i - 3] = granted or 0
    reply[at + 4 * i - 2] = granted and lease_life[i] or 0
    reply[at + 4 * i - 1] = granted and lease_tat[i] or 0
    reply[at + 4 * i] = granted and lease_period[i] or 0
  end
  reply[at + 4 * n + 1] = now_us
end
if (delayed_any or stamped and stamps) and allowed and not peek then
  -- The stamps a give-back call or a split decision's refund needs, after the groups (and the lease's words).
  reply[1] = reply[1] + STAMPED
  for i = 1, n do
    local stamp = stamps[i]
    reply[#reply + 1] = stamp and stamp[1] or 0
    reply[#reply + 1] = stamp and stamp[2] or 0
    reply[#reply + 1] = stamp and now_us or 0
  end
end
if periods or calendars then -- last: every rule's period in force, negative where an override applied
  reply[1] = reply[1] + PERIODS
  for i = 1, n do
    local period = calendars and calendars[i] or periods and periods[i] -- ms
    local overridden = periods and periods[i] -- an override applied (a calendar rule keeps its period)
    reply[#reply + 1] = not period and tonumber(ARGV[first + (i - 1) * PER_RULE + PERIOD])
      or overridden and -period
      or period
  end
end
return reply
