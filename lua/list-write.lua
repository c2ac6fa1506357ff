#!lua flags=allow-key-locking
--[[
list-write: one live list replaced or edited in one step (src/admin/lists.ts, docs/lists.md), from entries the
admin API checked and staged first: either all of the change applies or none of it. The change is also logged,
so that an isolate holding the list applies it instead of reading the whole list again (src/live/lists.ts).
KEYS:
  KEYS[1]  the list <prefix>:list:{<name>}: a sorted set, member = the entry's canonical text, score = when it
           expires (ms since the epoch, Redis time) or +inf
  KEYS[2]  the staged entries to add (a sorted set like the list), deleted here
  KEYS[3]  the staged entries to remove (a set of canonical texts), deleted here; empty for a replace
  KEYS[4]  the list's change log <prefix>:list:{<name>}:log: a Redis list, newest first, each item
           "<run>:<seq>" then, one a line, "+<score> <member>" added / "-<member>" removed in the order applied,
           or the one line "*" (read the whole list: a replace, or a change too big to log)
ARGV:
  ARGV[1]  "replace" (the list becomes KEYS[2]) or "patch" (KEYS[3] removed from the list, then KEYS[2] added)
  ARGV[2]  now, ms (Redis time, read by the caller just before staging)
  ARGV[3]  the most entries a list may hold
  ARGV[4]  a new run id, used when the log is empty: seqs restart from 1 under a new run, which no reader holds
  ARGV[5]  items the log keeps
  ARGV[6]  how long the log outlives its last write, ms
  ARGV[7]  the most entries one item logs (more: "*")
Reply: { 1, entries held } when written; { 0, entries it would hold } when that is more than ARGV[3] (nothing
changed, nothing logged). Entries that expired are dropped first, and the list's key expires with its last
entry (no TTL while an entry has none).
]]

local list = KEYS[1] -- the live list
local adds = KEYS[2] -- staged entries to add
local removes = KEYS[3] -- staged entries to remove
local log = KEYS[4] -- the change log
local replace = ARGV[1] == "replace"
local now_ms = tonumber(ARGV[2]) -- ms
local max_entries = tonumber(ARGV[3]) -- entries
local new_run = ARGV[4] -- id
local log_items = tonumber(ARGV[5]) -- items
local log_ttl_ms = tonumber(ARGV[6]) -- ms
local log_most = tonumber(ARGV[7]) -- entries per item

local function discard()
  redis.call("DEL", adds, removes)
end

local changes = nil -- the lines of a patch's log item; nil: "*"
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
  local removed_list = redis.call("SMEMBERS", removes)
  for _, member in ipairs(removed_list) do
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
  if #removed_list + #added / 2 <= log_most then changes = {} end
  for _, member in ipairs(removed_list) do
    redis.call("ZREM", list, member)
    if changes then changes[#changes + 1] = "-" .. member end
  end
  for i = 1, #added, 2 do
    redis.call("ZADD", list, added[i + 1], added[i])
    if changes then changes[#changes + 1] = "+" .. added[i + 1] .. " " .. added[i] end
  end
end
discard()

-- The log's item: the next seq of the run the newest item names, or a new run.
local newest = redis.call("LINDEX", log, 0)
local run, seq = new_run, 0
if newest then
  local id_run, id_seq = string.match(newest, "^([^:\n]+):(%d+)")
  if id_run then run, seq = id_run, tonumber(id_seq) end
end
local body = changes and table.concat(changes, "\n") or "*"
redis.call("LPUSH", log, run .. ":" .. (seq + 1) .. "\n" .. body)
redis.call("LTRIM", log, 0, log_items - 1)
redis.call("PEXPIRE", log, log_ttl_ms)

local last = redis.call("ZRANGE", list, -1, -1, "WITHSCORES")
if #last == 0 then return { 1, 0 } end
if last[2] == "inf" then
  redis.call("PERSIST", list)
else
  redis.call("PEXPIREAT", list, last[2])
end
return { 1, redis.call("ZCARD", list) }
