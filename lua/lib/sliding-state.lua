--[[
lib/sliding-state.lua: read_sliding(key, window), a sliding-window rule's state as it stands in `window`.
  key      <prefix>:<rule>:{<hash>}, the string "window:prev:cur" (lua/decide/sliding-window.lua)
  window   the current window's number, floor(now / period)
  returns  prev, cur (units counted in the previous and the current window, 0 where none), and `same`:
           "window:prev:" as stored when the state is of this window (a write reuses it, with KEEPTTL),
           else nil. State of an older window, or of another shape (the rule changed algorithm under the
           same name), reads as empty: GET by pcall, and the caller's SET replaces it.
Included by the sliding-window fast path (created only when it runs), by lua/decide/rules.lua and by
lua/settle.lua; a function costs nothing measurable beside the match it wraps (docs/script.md).
]]

local function read_sliding(key, window)
  local raw = redis.pcall("GET", key)
  if type(raw) == "string" then
    local head, w, p, c = string.match(raw, "^((%d+):(%d+):)(%d+)$")
    w = tonumber(w)
    if w == window then
      return tonumber(p), tonumber(c), head
    elseif w == window - 1 then
      return tonumber(c), 0, nil
    end
  end
  return 0, 0, nil
end
