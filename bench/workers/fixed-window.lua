-- The minimal fixed window behind target (b'): the cheapest script a Redis-decided request can run.
-- KEYS[1] counter key; ARGV[1] window length (ms). Returns the count after this request.
local window_ms = tonumber(ARGV[1]) -- ms
local count = redis.call("INCR", KEYS[1])
if count == 1 then redis.call("PEXPIRE", KEYS[1], window_ms) end
return count
