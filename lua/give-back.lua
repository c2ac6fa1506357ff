#!lua flags=allow-key-locking
--[[
give-back: a delayed request's reserved slot given back, its client gone before the slot came (a rule with
a delay only: src/middleware/delay.ts). A compare-and-set: why it never over-admits, docs/script.md
("Give-back").
KEYS:
  KEYS[1]  the rule's state key <prefix>:<rule>:{<hash>}, a token-bucket/gcra TAT (µs)
  KEYS[2]  its reset fence <prefix>:<rule>:{<hash>}:reset (read only)
ARGV:
  ARGV[1]  the TAT the decision wrote, µs, as the decision's reply gave it
  ARGV[2]  the TAT it replaced, µs
  ARGV[3]  Redis's clock when the decision wrote, µs
Reply: 1 if the slot was given back (the replaced TAT put back), else 0 (the slot stays taken).
]]
--#include lib/constants

local state = KEYS[1] -- TAT, µs
local fence = KEYS[2] -- exists while an admin reset's or override change's fence stands
local written = ARGV[1] -- µs, compared as the string GET returns
local replaced = ARGV[2] -- µs
local decided_us = tonumber(ARGV[3]) -- µs

-- Another write since, or a reset fence: the slot stays taken. Both in one MGET (one billed command).
local read = redis.call("MGET", state, fence) -- the TAT, and the fence's "1" (false: none)
if read[1] ~= written or read[2] then
  return 0
end
local time = redis.call("TIME")
if tonumber(time[1]) * 1000000 + tonumber(time[2]) - decided_us > STAMP_HORIZON_MS * 1000 then
  return 0 -- older than any stamp proves: a reset since may have let fresh requests rebuild that very TAT
end
redis.call("SET", state, replaced, "PXAT", format("%d", ceil(tonumber(replaced) / 1000)))
return 1
