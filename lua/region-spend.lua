#!lua flags=allow-key-locking
--[[
region-spend: a request decided in its region's database from the units the primary leased to that region
(src/regions, docs/regions.md): when every rule's pool holds the rule's cost, all of them are spent; else none
is, and the edge asks the primary. A pool expires when its lease does (PXAT, lua/region-deposit.lua). Why no
spend here over-admits: docs/regions.md ("Why a region never over-admits").
KEYS (n rules, 3 each):
  KEYS[3i-2]  rule i's pool <prefix>:<rule>:{<hash>}:pool, "<left>:<granted>:<renewing 0|1>:<terms>:<figures>"
  KEYS[3i-1]  rule i's next pool <prefix>:<rule>:{<hash>}:pool-next, the same shape: a renewal's units, which
              take the pool's place once it runs short
  KEYS[3i]    rule i's pace <prefix>:<rule>:{<hash>}:pace, "<ms>:<units>:<since>": when (this database's clock)
              the region last missed or was granted units, and how many (0: none), for sizing the next ask;
              since when this database has held the record without a break (lua/region-deposit.lua)
ARGV:
  ARGV[2i-1]  rule i's cost, units
  ARGV[2i]    rule i's terms "<limit>/<period ms>/<burst>": a pool leased under other terms is not spent
  ARGV[2n+1]  how long a pace record lives, ms
Reply:
  spent:  { 1, now_ms (Redis's clock; 0 unless a renewal is asked), pool_1 … pool_n (each value after the
          spend), renew_1 … renew_n (1: this spend took the pool to half of its grant or below: renew it) }
  missed: { 0, now_ms (Redis's clock), pace_1 … pace_n (as it was; "" where none) }; each pace now records
          this miss ("<now_ms>:0:<since>", until a deposit replaces it; since kept, or now_ms if none)
]]

local n = (#ARGV - 1) / 2 -- rules
local pace_ms = ARGV[#ARGV] -- ms
local PATTERN = "^(%d+):(%d+):(%d):([^:]*)(.*)$" -- left, granted, renewing, terms, figures

local lefts, granteds, renewings, terms_of, figures_of = {}, {}, {}, {}, {}
local spendable = true
for i = 1, n do
  local pool = KEYS[3 * i - 2]
  local cost = tonumber(ARGV[2 * i - 1]) -- units
  local terms = ARGV[2 * i] -- "<limit>/<period ms>/<burst>"
  local left, granted, renewing, held, figures
  local value = redis.call("GET", pool)
  if value then
    left, granted, renewing, held, figures = string.match(value, PATTERN)
  end
  if not value or held ~= terms or tonumber(left) < cost then
    -- Run short: a renewal's units take the pool's place, with their own expiry (RENAME keeps it). What the
    -- pool still held (fewer units than the cost) is lost: spent with the next pool's it would outlive its lease.
    local waiting = redis.call("GET", KEYS[3 * i - 1])
    if waiting then
      redis.call("RENAME", KEYS[3 * i - 1], pool)
      left, granted, renewing, held, figures = string.match(waiting, PATTERN)
    end
  end
  if not left or held ~= terms or tonumber(left) < cost then
    spendable = false
    break
  end
  lefts[i], granteds[i], renewings[i], terms_of[i], figures_of[i] = tonumber(left) - cost, granted, renewing, held, figures
end

if not spendable then
  local time = redis.call("TIME")
  local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  local reply = { 0, now_ms }
  for i = 1, n do
    local pace = redis.call("GET", KEYS[3 * i]) or ""
    local since = string.match(pace, "^%d+:%d+:(%d+)$") or now_ms -- a record's first write, kept
    reply[#reply + 1] = pace
    redis.call("SET", KEYS[3 * i], now_ms .. ":0:" .. since, "PX", pace_ms)
  end
  return reply
end

local reply = { 1, 0 }
local renew = {}
for i = 1, n do
  local renewing = renewings[i]
  renew[i] = 0
  if renewing == "0" and lefts[i] * 2 <= tonumber(granteds[i]) then
    renewing, renew[i] = "1", 1 -- one renewal per grant, whichever isolate spends its half
  end
  local value = lefts[i] .. ":" .. granteds[i] .. ":" .. renewing .. ":" .. terms_of[i] .. figures_of[i]
  redis.call("SET", KEYS[3 * i - 2], value, "KEEPTTL")
  reply[2 + i] = value
end
for i = 1, n do
  reply[2 + n + i] = renew[i]
  if renew[i] == 1 and reply[2] == 0 then
    local time = redis.call("TIME")
    reply[2] = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  end
end
return reply
