--[[
lib/override.lua: read_override(key), the identity's override under one rule.
  key      <prefix>:override:<rule>:{<hash>}, a hash: limit (units), period (ms), burst (units)
  returns  whether there is one, then its limit, period (ms) and burst, nil where it sets none
HGETALL, not HMGET: an override may have expired since the caller learnt of it, and an empty reply is the
cheapest. Included after the decision's fast paths: a chunk-level function is created again by every call
that reaches its definition, and they never read an override.
]]

local function read_override(key)
  local o = redis.call("HGETALL", key)
  local limit, period, burst
  for j = 1, #o, 2 do
    local field = o[j]
    if field == "limit" then
      limit = tonumber(o[j + 1])
    elseif field == "period" then
      period = tonumber(o[j + 1])
    elseif field == "burst" then
      burst = tonumber(o[j + 1])
    end
  end
  return o[1] ~= nil, limit, period, burst
end
