#!lua flags=allow-key-locking
--[[
decide-with-options: a decision as in lua/decide.lua, with options a plain decision never pays for: peek
(the admin API's view), stamps (a split decision's refund needs them), a time offset (tests). No fast path.
KEYS (n rules):
  KEYS[i]          state key of rule i = 1..n  <prefix>:<rule>:{<hash>}
  KEYS[n + k]      override of the k-th rule whose mode says "with override" (read only)
ARGV:
  ARGV[1]          request id ("" unless a sliding-log, concurrency or shed rule stores it)
  ARGV[2]          "1" peek: evaluate with the given cost, write nothing | "2" stamped: the reply carries
                   the stamps whenever the request is allowed | "0" neither
  ARGV[3]          ms added to Redis's TIME ("0" in production; tests that travel in time: fixed-window
                   counters expire on Redis's real clock, so for them only offsets within one window hold)
  ARGV[4 + 7(i-1)] rule i's group, 7 slots (the table in lua/decide/rules.lua)
Reply: the table in lua/decide/rules.lua (never a short reply).
]]
--#include lib/constants

local request_id = ARGV[1] -- names what a sliding-log, concurrency or shed rule stores
local peek = ARGV[2] == "1" -- evaluate, write nothing
local stamped = ARGV[2] == "2" -- the reply carries every written bucket's stamps
local offset_ms = tonumber(ARGV[3]) -- ms; 0 in production
local first = 4 -- ARGV index of rule 1's group
local n = (#ARGV - 3) / PER_RULE -- rules
local lease, lease_ms, wanted_at = false, 0, 0 -- lua/lease.lua sets them
local clock = true -- peek and time travel always read it
local now_us, now_ms -- µs, ms: Redis's clock plus the offset

--#include lib/override
--#include decide/rules
