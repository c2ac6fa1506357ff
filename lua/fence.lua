#!lua flags=allow-key-locking
--[[
fence: one identity's reset fence raised, and for an admin reset its state deleted behind it and its block
lifted, in one step (src/admin/fence.ts): no request, in any isolate, ever finds the state reset and the
block still standing, or the block gone and the old state still full. While the fence stands no refund or
give-back reaches the fresh state; why it stands as long as it does: docs/script.md ("Why a reset's fence may
be short").
KEYS:
  KEYS[1]      the reset fence <prefix>:<rule>:{<hash>}:reset
  KEYS[2]      a bucket's reset only: its refund ledger <prefix>:<rule>:{<hash>}:refunded (read only)
  KEYS[2|3..]  a reset only: the state keys to delete
  KEYS[#KEYS]  when ARGV[4] is "1": the identity's block <prefix>:<rule>:{<hash>}:block, deleted (its TTL never
               lengthens the fence)
ARGV:
  ARGV[1]  how long the fence must stand, ms (resetFenceMs of every limit the units may have been taken
           under, src/engine/keys.ts)
  ARGV[2]  "1" for a token-bucket/gcra reset (KEYS[2] is its ledger), else "0"
  ARGV[3]  the longest a fence stands, ms (RESET_FENCE_MAX_MS)
  ARGV[4]  "1" when the last key is the block to lift (a rule with a `block`), else "0" or absent
Reply: { state keys deleted, 1 when a block was lifted else 0 }.
A fence is never shortened. A bucket's reset also fences until the TAT the state held (its PTTL), up to the
longest, and for the longest while its refund ledger exists.
]]

local fence = KEYS[1] -- "1" while it stands
local fence_ms = tonumber(ARGV[1]) -- ms
local bucket = ARGV[2] == "1" -- KEYS[2] is the bucket's refund ledger
local longest_ms = tonumber(ARGV[3]) -- ms
local block = ARGV[4] == "1" and KEYS[#KEYS] or nil -- the block to lift, or none

local states_at = bucket and 3 or 2 -- KEYS index of the first state key
local states_to = block and #KEYS - 1 or #KEYS -- KEYS index of the last state key
if bucket then
  if redis.call("EXISTS", KEYS[2]) == 1 then
    fence_ms = longest_ms -- a split refund lowered its TAT lately, maybe below a write still pending
  else
    for i = states_at, states_to do -- until its TAT too (+1: Redis counts the PX from its whole ms)
      fence_ms = math.max(fence_ms, math.min(redis.call("PTTL", KEYS[i]) + 1, longest_ms))
    end
  end
end
if fence_ms > 0 and redis.call("PTTL", fence) < fence_ms then -- never shorter (-2: none yet)
  redis.call("SET", fence, "1", "PX", fence_ms)
end
local deleted = states_to >= states_at and redis.call("DEL", unpack(KEYS, states_at, states_to)) or 0
local lifted = block and redis.call("DEL", block) or 0
return { deleted, lifted }
