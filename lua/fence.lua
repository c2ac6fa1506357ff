#!lua flags=allow-key-locking
--[[
fence: one identity's reset fence raised, and for an admin reset its state deleted behind it, in one step
(src/admin/fence.ts). While the fence stands no refund or give-back reaches the fresh state; why it stands
as long as it does: docs/script.md ("Why a reset's fence may be short").
KEYS:
  KEYS[1]      the reset fence <prefix>:<rule>:{<hash>}:reset
  KEYS[2]      a bucket's reset only: its refund ledger <prefix>:<rule>:{<hash>}:refunded (read only)
  KEYS[2|3..]  a reset only: the state keys to delete
ARGV:
  ARGV[1]  how long the fence must stand, ms (resetFenceMs of every limit the units may have been taken
           under, src/engine/keys.ts)
  ARGV[2]  "1" for a token-bucket/gcra reset (KEYS[2] is its ledger), else "0"
  ARGV[3]  the longest a fence stands, ms (RESET_FENCE_MAX_MS)
Reply: the number of state keys deleted.
A fence is never shortened. A bucket's reset also fences until the TAT the state held (its PTTL), up to the
longest, and for the longest while its refund ledger exists.
]]

local fence = KEYS[1] -- "1" while it stands
local fence_ms = tonumber(ARGV[1]) -- ms
local bucket = ARGV[2] == "1" -- KEYS[2] is the bucket's refund ledger
local longest_ms = tonumber(ARGV[3]) -- ms

local states_at = bucket and 3 or 2 -- KEYS index of the first state key
if bucket then
  if redis.call("EXISTS", KEYS[2]) == 1 then
    fence_ms = longest_ms -- a split refund lowered its TAT lately, maybe below a write still pending
  else
    for i = states_at, #KEYS do -- until its TAT too (+1: Redis counts the PX from its whole ms)
      fence_ms = math.max(fence_ms, math.min(redis.call("PTTL", KEYS[i]) + 1, longest_ms))
    end
  end
end
if fence_ms > 0 and redis.call("PTTL", fence) < fence_ms then -- never shorter (-2: none yet)
  redis.call("SET", fence, "1", "PX", fence_ms)
end
return #KEYS >= states_at and redis.call("DEL", unpack(KEYS, states_at)) or 0
