#!lua flags=allow-key-locking
--[[
reaim: a fixed-window counter made to expire at the end of the current window of the period now in force,
its count kept; the admin API's, once it has set or removed an override (docs/operating.md, "How soon an
override applies"; why: docs/script.md, "Time").
KEYS:
  KEYS[1]  the rule's state key <prefix>:<rule>:{<hash>}, a fixed-window counter
ARGV:
  ARGV[1]  the period now in force, ms
Reply: 1 if re-aimed, else 0 (no counter, or it already ends there).
]]
--#include lib/constants

local counter = KEYS[1] -- integer, expires at its window's end
local period = tonumber(ARGV[1]) -- ms

local time = redis.call("TIME")
local now = tonumber(time[1]) * 1000 + floor(tonumber(time[2]) / 1000) -- ms
local until_end = period - now % period -- ms until the window in force ends
local ttl = redis.call("PTTL", counter) -- ms; -2: no counter, -1: none of its own
-- In a window's first instant the counter still visible may be the previous window's, about to expire: its
-- PTTL gives it away (as in lua/decide/fixed-window.lua), and it is left to expire, count and all.
local dying = now % period < 2 and ttl >= 0 and ttl < period / 2
if ttl == -2 or dying or math.abs(ttl - until_end) <= REAIM_SLACK_MS then
  return 0
end
redis.call("PEXPIREAT", counter, format("%d", now + until_end))
return 1
