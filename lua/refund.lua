#!lua flags=allow-key-locking
--[[
refund: give back units consumed earlier (a lease's unspent units, a split decision undone), never more
than the state still holds from that time, and none into a state reset since. Why each algorithm's return
never over-admits: docs/script.md ("Returned units", "The refund ledger").
KEYS (n rules; `marked`: where a split decision's refund can reach this database, and always for one):
  KEYS[i]            state key of rule i = 1..n  <prefix>:<rule>:{<hash>}
  KEYS[n + k]        override of the k-th rule whose mode says "with override" (read only)
  then, if marked:   every rule's refund ledger <key>:refunded, then every rule's lease mark <key>:leased
  last:              every rule's reset fence <key>:reset (read only)
  (marked iff #KEYS >= 4n: with them a call has at least 4n keys, without at most 3n)
ARGV:
  ARGV[1]            the request id the units were consumed under ("" if none)
  ARGV[2]            when they were consumed, µs on Redis's clock: "0" unknown (the current window);
                     token-bucket/gcra: the TAT their lease wrote; "-<age>": at most <age> µs ago (a split
                     decision undone, and then every rule's stamp follows the groups)
  ARGV[3 + 7(i-1)..] rule i's group as in a decision (lua/decide/rules.lua; a calendar period's bounds in
                     its delay slot), cost = units to give back,
                     limit and period those the units were priced at; mode 5 | 4: as 1 | 0 with an
                     override key, and the limits are that override's (given back only while it stands)
  after the groups   a split refund's stamp per rule, 3 slots: the TAT its decision wrote (µs, "0" none),
                     Redis's clock then (µs), the TAT it replaced (µs)
Reply: { units given back } per rule, in rule order.
]]
--#include lib/constants
--#include lib/override

local request_id = ARGV[1] -- sliding-log members and concurrency slots are named by it
local when_arg = ARGV[2] -- µs: 0 unknown, > 0 a lease's, < 0 "at most this long ago"
local first = 3 -- ARGV index of rule 1's group
local split_refund = tonumber(when_arg) < 0 -- each rule's stamp follows the groups
local STAMP_WORDS = 3 -- a stamp's slots: written TAT, clock then, replaced TAT
local n = (#ARGV - first + 1) / (split_refund and PER_RULE + STAMP_WORDS or PER_RULE) -- rules
local marked = #KEYS >= 4 * n -- the refund ledgers and lease marks are there

local time = redis.call("TIME")
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2]) -- µs, Redis's clock
local written_us = tonumber(when_arg) -- > 0: a lease's return, the TAT its lease wrote
local when_us = written_us -- µs: the instant the units were consumed at, as far as known
if when_us < 0 then
  -- "At most -when µs ago" (a split decision undone): the earliest instant the units can have been taken,
  -- so a window boundary crossed since then refunds nothing rather than the next window's units.
  when_us = now_us + when_us
elseif when_us == 0 then
  when_us = now_us
end

-- Up to `units` taken back from a live fixed-window counter (the caller checked it exists), never below 0 (a
-- TAT left under the rule's name by another algorithm counts nothing): the units given back. DECRBY first and
-- put right after, rarely: one command where a GET before would be two.
local function give_back(key, units)
  local left = redis.pcall("DECRBY", key, units)
  if type(left) ~= "number" then
    return 0 -- not an integer
  elseif left > 1e13 then
    redis.call("INCRBY", key, units) -- a µs timestamp, not a count
    return 0
  elseif left < 0 then
    redis.call("INCRBY", key, -left) -- held fewer than `units`: back to 0
    return units + left
  end
  return units
end

local returned = {}
local override_at = n -- KEYS index of the last override key used
for i = 1, n do
  -- Rule i's group (the table in lua/decide/rules.lua).
  local at = first + (i - 1) * PER_RULE
  local algorithm = ARGV[at + ALGORITHM] -- code (lib/constants.lua)
  local mode = ARGV[at + MODE] -- 1 | 0; 3 | 2 with an override key; 5 | 4 priced at that override
  local limit = tonumber(ARGV[at + LIMIT]) -- units per period the units were priced at
  local period = tonumber(ARGV[at + PERIOD]) -- ms
  local units = tonumber(ARGV[at + COST]) -- units to give back
  local held = split_refund and ARGV[at + DELAY] ~= "0" -- a rule whose requests may be held (a delay)
  -- Rule i's stamp, a split refund's only.
  local stamp_at = first + n * PER_RULE + STAMP_WORDS * (i - 1)
  local stamp_us = split_refund and tonumber(ARGV[stamp_at]) or 0 -- µs, the TAT W its decision wrote
  local decided_arg = split_refund and ARGV[stamp_at + 1] -- µs, Redis's clock d when it wrote
  local replaced_us = split_refund and tonumber(ARGV[stamp_at + 2]) -- µs, the TAT P it replaced
  local key = KEYS[i]
  local fence = KEYS[#KEYS - n + i] -- the state's reset fence
  local ledger, leased = KEYS[#KEYS - 3 * n + i], KEYS[#KEYS - 2 * n + i] -- when marked

  if mode == "3" or mode == "2" then -- the limits in force are the override's (as a decision reads them)
    override_at = override_at + 1
    local _, o_limit, o_period = read_override(KEYS[override_at])
    limit, period = o_limit or limit, o_period or period
  elseif mode == "5" or mode == "4" then
    -- Priced at an override: its units go back only while that override is still in force. One that ended
    -- by its ttl since (no admin call, no fence) may have left a counter that never counted them, ending
    -- where the units' window ends (docs/script.md, "Returned units"); one set again since is fenced.
    override_at = override_at + 1
    local exists, o_limit, o_period = read_override(KEYS[override_at])
    if not (exists and o_limit == limit and (o_period or period) == period) then
      units = 0
    end
  end
  local period_us = period * 1000 -- µs
  local given = 0 -- units actually given back
  -- A sliding window's or a bucket's state, whether its fence stands, and a bucket's lease mark (when marked):
  -- one MGET, billed as one command where GET, EXISTS and GET were three (each is a string, or false).
  local state, fenced, mark
  if limit > 0 and units > 0 and (algorithm == SLIDING or algorithm == BUCKET or algorithm == GCRA) then
    local read = marked and redis.call("MGET", key, fence, leased) or redis.call("MGET", key, fence)
    state, fenced, mark = read[1], read[2], read[3]
  end
  if limit <= 0 or units <= 0 then -- nothing was consumed under a blocking override
  elseif fenced or algorithm == FIXED and redis.call("EXISTS", fence) == 1 then
    -- Reset since: what was taken before belongs to the state the reset threw away. After the fence, the
    -- tests below refuse it (docs/script.md, "Why a reset's fence may be short"). (Sliding-log and
    -- concurrency refunds remove members by name, and a reset already removed those.)
  elseif algorithm == FIXED and string.find(ARGV[at + DELAY], ":", 1, true) then
    -- A calendar period's counter (lua/decide/calendar.lua): only while the units' period is still the
    -- current one, and only into that period's counter (its expiry is the period's end).
    local delay_arg = ARGV[at + DELAY] -- the bounds the units' decision was sent
    local now_ms = floor(now_us / 1000) -- ms
    local start_ms, end_ms -- ms
    --#include decide/calendar#period
    if when_us >= start_ms * 1000
      and math.abs(redis.call("PTTL", key) - (end_ms - now_ms)) <= REAIM_SLACK_MS then
      given = give_back(key, units)
    end
  elseif algorithm == FIXED then
    -- Only the counter of the window the units were taken in, while it is that window's, and only if it
    -- ends where that window ends: one created or re-aimed under another period (an override set, removed
    -- or ended since) ends elsewhere, and did not count them (docs/script.md, "Returned units").
    local window = floor(when_us / period_us)
    if window == floor(now_us / period_us)
      and math.abs(redis.call("PTTL", key) - ((window + 1) * period_us - now_us) / 1000) <= REAIM_SLACK_MS then
      given = give_back(key, units)
    end
  elseif algorithm == SLIDING then
    if state then
      local head, w, c = string.match(state, "^((%d+):%d+:)(%d+)$")
      w, c = tonumber(w), tonumber(c)
      if w and w == floor(when_us / period_us) and w == floor(now_us / period_us) then
        given = math.min(units, c)
        redis.call("SET", key, head .. (c - given), "KEEPTTL")
      end
    end
  elseif algorithm == BUCKET or algorithm == GCRA then
    -- The TAT moves back by the units' emission intervals, never below now: what has refilled since stays
    -- refilled. A lease's return (`when` > 0: the TAT the lease wrote) only while that write is still the
    -- TAT: after any other arrival, a reset, or a refill past it, its units may stand for someone else's.
    -- A split decision's refund (its stamp: the TAT W it wrote at d, replacing P) gives back at most W - now,
    -- less what refunds of earlier split decisions gave back since d (its refund ledger), and enters what it
    -- gives in the ledger; nothing without a stamp, or after a lease since d. To a rule with a delay it is a
    -- compare-and-set instead: P again while W is still the TAT (docs/script.md, "Returned units").
    local tat_us = tonumber(state)
    local expected_us = held and stamp_us or written_us -- compared with the TAT when > 0
    if expected_us > 0 and tat_us ~= expected_us or split_refund and stamp_us == 0 then
      tat_us = nil -- no longer the write the units' call made, or nothing known owed
    end
    if tat_us and tat_us > now_us then
      local interval_us = ceil(period_us / limit)
      local owed_us = units * interval_us
      local decided_us = split_refund and tonumber(decided_arg) -- d
      if split_refund and now_us - decided_us > STAMP_HORIZON_MS * 1000 then
        owed_us = 0 -- older than the ledger keeps (and than the longest reset fence): nothing known owed
      elseif held then
        owed_us = math.min(owed_us, tat_us - replaced_us) -- back to P
      elseif split_refund then
        local leased_us = tonumber(mark) or 0 -- the last lease grant or return
        if leased_us >= decided_us or not marked then
          owed_us = 0 -- a lease may lie above its units (or the keys telling are missing): nothing known owed
        else
          local since_us = 0 -- µs that refunds of split decisions made at or before d gave back since d
          if replaced_us ~= decided_us then
            -- Earlier units still lay above d (P > d: the decision took P as at least d): refunds of theirs
            -- since d may have moved this span down. With P = d (the bucket full then) none can have: nothing
            -- to read (docs/script.md, "The refund ledger").
            for _, entry in ipairs(redis.call("ZRANGEBYSCORE", ledger, decided_arg, "+inf")) do
              local moved_us, entry_decided_us = string.match(entry, "^(%d+):(%d+):")
              if tonumber(entry_decided_us) <= decided_us then
                since_us = since_us + tonumber(moved_us)
              end
            end
          end
          owed_us = math.min(owed_us, stamp_us - now_us - since_us)
        end
      end
      if owed_us > 0 then
        local back_us = math.max(tat_us - owed_us, now_us)
        given = math.min(units, ceil((tat_us - back_us) / interval_us))
        redis.call("SET", key, format("%d", back_us), "PXAT", format("%d", ceil(back_us / 1000) + 1))
        if split_refund and not held and replaced_us == decided_us and tat_us == stamp_us then
          -- Nothing lay below this span at d and nothing lies above it now (the TAT is still W): every later
          -- decision was given all its units back already, so no refund to come can read an entry (docs/script.md,
          -- "The refund ledger").
        elseif split_refund and not held then
          local entry = format("%d:%s:%s", tat_us - back_us, decided_arg, request_id)
          redis.call("ZADD", ledger, format("%d", now_us), entry)
          if now_us % 16 == 0 then
            -- Members older than the horizon are never read (an older refund gives nothing): dropped now and
            -- then, one refund in 16 on average (the clock's µs), rather than one command on every refund.
            redis.call("ZREMRANGEBYSCORE", ledger, "-inf", format("%d", now_us - STAMP_HORIZON_MS * 1000))
          end
          redis.call("PEXPIRE", ledger, STAMP_HORIZON_MS)
        elseif written_us > 0 and marked then -- a lease's return: a split refund of a decision before it gives nothing
          redis.call("SET", leased, format("%d", now_us), "PX", STAMP_HORIZON_MS)
        end
      end
    end
  elseif algorithm == LOG then
    -- The request id's members (`<id>:<score>#<units>`, or the layout before's `<id>:<score>:<unit>`, one
    -- unit each): the one its write or lease scored at `when`, or with `when` unknown any still in the window,
    -- oldest first. Each gives back up to its units; a member left with some is renamed, and `total` follows.
    local from, to, prefix
    if written_us > 0 then
      from = format("%d", when_us)
      to, prefix = from, request_id .. ":" .. from
    else
      from, to, prefix = "(" .. format("%d", now_us - period_us), "+inf", request_id .. ":"
    end
    local found = redis.pcall("ZRANGEBYSCORE", key, from, to, "WITHSCORES")
    local removed, kept = {}, nil -- members to remove; { score, name } of one to write back smaller
    if not found.err then
      for j = 1, #found, 2 do
        local member = found[j]
        if given < units and string.sub(member, 1, #prefix) == prefix and member ~= "total" then
          local held_arg = string.match(member, "#(%d+)$")
          local held = tonumber(held_arg) or 1 -- units the member holds
          local back = math.min(units - given, held)
          given = given + back
          removed[#removed + 1] = member
          if back < held then
            kept = { found[j + 1], string.sub(member, 1, #member - #held_arg) .. (held - back) }
          end
        end
      end
    end
    for j = 1, #removed, 1000 do -- unpack() has a stack limit
      redis.call("ZREM", key, unpack(removed, j, math.min(j + 999, #removed)))
    end
    if kept then
      redis.call("ZADD", key, kept[1], kept[2])
    end
    if given > 0 then
      redis.call("ZADD", key, "XX", "INCR", given, "total") -- scored -units: `total` less what came back
    end
  elseif algorithm == CONCURRENCY then
    local removed = redis.pcall("ZREM", key, request_id)
    given = type(removed) == "number" and removed or 0
  end
  returned[i] = given
end
return returned
