#!lua flags=allow-key-locking
--[[
lease: a decision (lua/decide/rules.lua) in which each rule may also take units for the isolate to spend
locally later (src/leases), up to what it asks per rule. Why no leased unit is ever spent where Redis would
not have admitted it: docs/script.md ("Leases"). A cost of 0 is a renewal: it takes only the lease (none
when nothing is left) and counts no request.
KEYS (n rules):
  KEYS[i]          state key of rule i = 1..n  <prefix>:<rule>:{<hash>}
  KEYS[n + k]      override of the k-th rule whose mode says "with override" (read only; its PTTL bounds a
                   lease's life)
  then, where a split decision's refund can reach this database, one per rule: its lease mark
                   <prefix>:<rule>:{<hash>}:leased, written by a bucket's grant (µs)
ARGV:
  ARGV[1]          request id (sliding-log members are named by it)
  ARGV[2]          the longest life a lease may have, ms
  ARGV[3]          ms added to Redis's TIME ("0" in production; tests)
  ARGV[4 + 7(i-1)] rule i's group, 7 slots (the table in lua/decide/rules.lua)
  ARGV[4 + 7n + i - 1] rule i's units wanted, this request's cost included (<= cost: no lease)
Reply: the table in lua/decide/rules.lua, with after the groups { units, life_ms, tat_us, period_ms } per rule
  (0s = no lease; tat_us: a bucket's written TAT, the "when" of its return; period_ms: the period in force),
  then Redis's now (µs: the "when" of a window's return; a log's is now + life_ms * 1000, its members' score).
A rule leases at most min(wanted, max(cost, available / 2)), and only for at least 10 ms.
]]
--#include lib/constants

local request_id = ARGV[1] -- names the sliding-log members it writes
local lease_ms = tonumber(ARGV[2]) -- ms, the longest life a lease may have
local offset_ms = tonumber(ARGV[3]) -- ms; 0 in production
local first = 4 -- ARGV index of rule 1's group
local n = (#ARGV - 3) / (PER_RULE + 1) -- rules
local wanted_at = first + n * PER_RULE -- ARGV index of rule 1's units wanted
local lease = true
local peek, stamped = false, false
local clock = true -- a lease's life is on the clock
local now_us, now_ms -- µs, ms: Redis's clock plus the offset

--#include lib/override
--#include decide/rules
