--[[
lib/counter.lua: count_first(key, cost_arg, cost), a window counter counted at once (INCRBY), before the
rule is decided: nothing else runs in between, so the caller takes the increment back if the rule or the
request denies (fixed-window and calendar periods: lua/decide/fixed-window.lua, lua/decide/calendar.lua).
  key       <prefix>:<rule>:{<hash>}, an integer counter
  cost_arg  units, as sent (INCRBY takes the string); cost: the same, a number
  returns   used, counting: the units counted before this request, and whether the increment stands
              a counter                   used, true  (used == 0: INCRBY created it, with no expiry yet)
              a token-bucket/gcra TAT     0, false    (a µs timestamp left under this rule name: the increment
                                                       is taken back, no count; the caller's SET replaces it)
              another type                nil, false  (INCRBY refused: nothing written; the caller reads)
Included by the fixed-window fast path (created only when it runs) and by lua/decide/rules.lua.
]]

local function count_first(key, cost_arg, cost)
  local counted = redis.pcall("INCRBY", key, cost_arg)
  if type(counted) ~= "number" then
    return nil, false
  end
  if counted - cost > 1e13 then
    redis.call("DECRBY", key, cost_arg)
    return 0, false
  end
  return counted - cost, true
end
