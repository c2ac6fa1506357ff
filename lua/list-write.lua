#!lua flags=allow-key-locking
--[[
list-write: one live list replaced or edited in one step (src/admin/lists.ts, docs/lists.md), from entries the
admin API checked and staged first: either all of the change applies or none of it.
KEYS:
  KEYS[1]  the list <prefix>:list:{<name>}: a sorted set, member = the entry's canonical text, score = when it
           expires (ms since the epoch, Redis time) or +inf
  KEYS[2]  the staged entries to add (a sorted set like the list), deleted here
  KEYS[3]  the staged entries to remove (a set of canonical texts), deleted here; empty for a replace
ARGV:
  ARGV[1]  "replace" (the list becomes KEYS[2]) or "patch" (KEYS[3] removed from the list, then KEYS[2] added)
  ARGV[2]  now, ms (Redis time, read by the caller just before staging)
  ARGV[3]  the most entries a list may hold
Reply: { 1, entries held } when written; { 0, entries it would hold } when that is more than ARGV[3] (nothing
changed). Entries that expired are dropped first, and the list's key expires with its last entry (no TTL
while an entry has none).
]]

local list = KEYS[1] -- the live list
local adds = KEYS[2] -- staged entries to add
local removes = KEYS[3] -- staged entries to remove
local replace = ARGV[1] == "replace"
local now_ms = tonumber(ARGV[2]) -- ms
local max_entries = tonumber(ARGV[3]) -- entries

local function discard()
  redis.call("DEL", adds, removes)
end

redis.call("ZREMRANGEBYSCORE", adds, "-inf", now_ms)
if replace then
  local count = redis.call("ZCARD", adds)
  if count > max_entries then
    discard()
    return { 0, count }
  end
  if count == 0 then
    redis.call("DEL", list)
  else
    redis.call("RENAME", adds, list)
  end
else
  redis.call("ZREMRANGEBYSCORE", list, "-inf", now_ms)
  local count = redis.call("ZCARD", list)
  local removed = {}
  for _, member in ipairs(redis.call("SMEMBERS", removes)) do
    removed[member] = true
    if redis.call("ZSCORE", list, member) then count = count - 1 end
  end
  local added = redis.call("ZRANGE", adds, 0, -1, "WITHSCORES")
  for i = 1, #added, 2 do -- a member removed and added again: -1 above if it was held, +1 here
    local member = added[i]
    if removed[member] or not redis.call("ZSCORE", list, member) then count = count + 1 end
  end
  if count > max_entries then
    discard()
    return { 0, count }
  end
  for member in pairs(removed) do
    redis.call("ZREM", list, member)
  end
  for i = 1, #added, 2 do
    redis.call("ZADD", list, added[i + 1], added[i])
  end
end
discard()

local last = redis.call("ZRANGE", list, -1, -1, "WITHSCORES")
if #last == 0 then return { 1, 0 } end
if last[2] == "inf" then
  redis.call("PERSIST", list)
else
  redis.call("PEXPIREAT", list, last[2])
end
return { 1, redis.call("ZCARD", list) }
