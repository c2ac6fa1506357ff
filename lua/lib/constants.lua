--[[
lib/constants.lua: what every script shares. Included first by each entry script (src/engine/scripts.ts
assembles them); defines locals only, reads no KEYS or ARGV.
  algorithm codes   as the rule groups carry them (src/engine/script.ts ALGORITHM_CODE), compared as strings
  rule group slots  offsets inside one rule's 7 ARGV slots (the table in lua/decide/rules.lua)
  horizons          how long a lease lives, a stamp proves anything, a fixed window's expiry may drift
Why each horizon has its value: docs/script.md.
]]

-- Algorithm codes, compared as the strings they arrive as (cheaper than tonumber).
local FIXED, SLIDING, LOG, BUCKET, GCRA, CONCURRENCY, SHED = "1", "2", "3", "4", "5", "6", "7"
-- Offsets of one rule's ARGV group (the table in lua/decide/rules.lua), and its size.
local ALGORITHM, MODE, LIMIT, PERIOD, BURST, COST, DELAY, PER_RULE = 0, 1, 2, 3, 4, 5, 6, 7
-- The longest a lease lives (RATE_LIMIT_LEASE_MS is validated to at most this), ms.
local LEASE_HORIZON_MS = 10000
-- The oldest stamp that proves anything, ms: a split decision's refund or a give-back whose decision is older
-- gives nothing (the longest reset fence may have fallen since); also how long a refund ledger keeps a member
-- and a lease mark stands (docs/script.md, "The refund ledger").
local STAMP_HORIZON_MS = 30000
-- How far a fixed-window counter's expiry may lie from its window's end before it is re-aimed, ms: PTTL and
-- TIME are read a moment apart, while the ends of windows of whole-second periods lie whole seconds apart.
local REAIM_SLACK_MS = 100
-- Locals, not globals: a global lookup per use costs more than the locals' one-time copy.
local floor, ceil, format, sub = math.floor, math.ceil, string.format, string.sub
