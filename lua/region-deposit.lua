#!lua flags=allow-key-locking
--[[
region-deposit: units the primary leased to this region (lua/lease.lua) put into one rule's pool, to be spent
by lua/region-spend.lua until they run out or their lease ends (src/regions, docs/regions.md). A pool never
outlives the lease of any unit it holds: two grants share a key only under the earlier of their ends.
KEYS:
  KEYS[1]  the rule's pool <prefix>:<rule>:{<hash>}:pool
  KEYS[2]  its next pool <prefix>:<rule>:{<hash>}:pool-next
  KEYS[3]  its pace <prefix>:<rule>:{<hash>}:pace, "<ms>:<units>:<since>" (lua/region-spend.lua)
  KEYS[4]  its drop mark <prefix>:<rule>:{<hash>}:pool-dropped: set (for ARGV[6] ms) when an admin change
           dropped the pools; a grant asked for before it was counted in the state the change reset
ARGV:
  ARGV[1]  units leased for the region (the granting request's cost not included)
  ARGV[2]  when the lease ends, ms on THIS database's clock: its clock before the primary was asked, plus the
           lease's life
  ARGV[3]  the pool's value after its units: ":<renewing 0>:<terms>:<figures>"
  ARGV[4]  the pace record "<ms>:<units>" (ms: this database's clock when the primary was asked); ARGV[5] its
           life, ms; the script adds the record's since
  ARGV[6]  how long a drop mark lives, ms (the longest life of a region's lease)
Reply: 1 into the pool, 2 into the next pool, 3 added to the next pool, 0 not added (its lease has ended, its
pools were dropped since it was asked for, or this database may have lost a drop since: see below)
]]

local units = tonumber(ARGV[1]) -- units
local ends_ms = tonumber(ARGV[2]) -- ms, this database's clock
local rest = ARGV[3] -- ":<renewing>:<terms>:<figures>"
local asked_ms = tonumber(string.match(ARGV[4], "^(%d+):")) -- ms, this database's clock
local mark_ms = tonumber(ARGV[6]) -- ms

-- The pace record is rewritten by every miss and deposit and keeps its since; it is gone, or younger than the
-- ask, only when this database lost its data (a restart) or the identity was quiet for the record's life. A
-- drop mark set before such a loss is lost with it: the grant may be one a reset since made void, and is refused.
local pace = redis.call("GET", KEYS[3])
local since = pace and string.match(pace, "^%d+:%d+:(%d+)$")
local since_ms = since and tonumber(since) -- ms, this database's clock
if not since_ms or since_ms > asked_ms then
  local time = redis.call("TIME")
  local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  redis.call("SET", KEYS[3], ARGV[4] .. ":" .. (since_ms or now_ms), "PX", ARGV[5])
  return 0
end
redis.call("SET", KEYS[3], ARGV[4] .. ":" .. since_ms, "PX", ARGV[5])
-- Dropped by an admin change (a reset, an override) after this grant was asked for: the primary no longer
-- counts its units, whichever isolate dropped the pools and whether or not the asking one has heard of it.
local mark_left = redis.call("PTTL", KEYS[4]) -- ms
if mark_left > 0 then
  local time = redis.call("TIME")
  local dropped_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000) - (mark_ms - mark_left)
  if asked_ms <= dropped_ms + 1 then -- (PTTL is whole ms: a tie counts as before the drop)
    return 0
  end
end
-- (A lease already ended sets a key that is gone at once: Redis deletes a key whose PXAT has passed.)
local value = units .. ":" .. units .. rest
local terms = string.match(rest, "^:%d:([^:]*)") -- "<limit>/<period ms>/<burst>"
local TERMS = "^%d+:%d+:%d:([^:]*)" -- a pool value's terms
local current = redis.call("GET", KEYS[1])
if not current or string.match(current, "^(%d+)") == "0" or string.match(current, TERMS) ~= terms then
  redis.call("SET", KEYS[1], value, "PXAT", ARGV[2])
  return 1
end
local waiting = redis.call("GET", KEYS[2])
if not waiting or string.match(waiting, TERMS) ~= terms then
  redis.call("SET", KEYS[2], value, "PXAT", ARGV[2])
  return 2
end
-- Both taken (requests that missed at once): the next pool holds both grants' units until the earlier end.
local time = redis.call("TIME")
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if ends_ms <= now_ms then
  return 0 -- a lease already ended: nothing to add, and the waiting units keep their own end
end
local waiting_ends = now_ms + redis.call("PTTL", KEYS[2])
local total = units + tonumber(string.match(waiting, "^(%d+)"))
redis.call("SET", KEYS[2], total .. ":" .. total .. rest, "PXAT", string.format("%d", math.min(ends_ms, waiting_ends)))
return 3
