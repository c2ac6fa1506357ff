#!lua flags=allow-key-locking
--[[
reaim: an identity's state carried into the limits now in force, the admin API's step once it has set or
removed an override (docs/operating.md, "How soon an override applies"; why: docs/script.md, "Time" and
"An override changes a bucket's rate"). What was counted is kept as units, never as time:
  fixed-window          the counter made to expire at the end of the current window of the period now in
                        force, its count kept
  token-bucket, gcra    the TAT moved so that it owes the same units at the emission interval now in force as
                        it owed at the one before (an exhausted client given a higher rate never waits longer)
KEYS:
  KEYS[1]  the rule's state key <prefix>:<rule>:{<hash>}: a fixed-window counter, or a bucket's TAT (µs)
ARGV:
  ARGV[1]  the period now in force, ms
  ARGV[2]  a bucket only: the limit now in force, units
  ARGV[3]  a bucket only: the limit before the change, units
  ARGV[4]  a bucket only: the period before the change, ms
Reply: 1 if the state changed, else 0 (no state, nothing owed, or already where it belongs).
]]
--#include lib/constants

local state = KEYS[1] -- a counter (expires at its window's end), or a TAT (expires when the bucket is full)
local period = tonumber(ARGV[1]) -- ms
local limit = tonumber(ARGV[2]) -- units; nil: a fixed-window counter
local limit_before = tonumber(ARGV[3]) -- units
local period_before = tonumber(ARGV[4]) -- ms

local time = redis.call("TIME")

if limit then
  -- Emission intervals as lua/decide/token-bucket.lua computes them (whole µs).
  local interval_us = ceil(period * 1000 / limit) -- µs per unit now
  local interval_before_us = ceil(period_before * 1000 / limit_before) -- µs per unit before
  local tat_us = tonumber(redis.pcall("GET", state))
  local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2]) -- µs
  if not tat_us or tat_us <= now_us or interval_us == interval_before_us then
    return 0
  end
  -- The units owed, (TAT - now) / interval before, owed again at the interval now.
  local moved_us = now_us + ceil((tat_us - now_us) * interval_us / interval_before_us)
  redis.call("SET", state, format("%d", moved_us), "PXAT", format("%d", ceil(moved_us / 1000)))
  return 1
end

local now = tonumber(time[1]) * 1000 + floor(tonumber(time[2]) / 1000) -- ms
local until_end = period - now % period -- ms until the window in force ends
local ttl = redis.call("PTTL", state) -- ms; -2: no counter, -1: none of its own
-- In a window's first instant the counter still visible may be the previous window's, about to expire: its
-- PTTL gives it away (as in lua/decide/fixed-window.lua), and it is left to expire, count and all.
local dying = now % period < 2 and ttl >= 0 and ttl < period / 2
if ttl == -2 or dying or math.abs(ttl - until_end) <= REAIM_SLACK_MS then
  return 0
end
redis.call("PEXPIREAT", state, format("%d", now + until_end))
return 1
