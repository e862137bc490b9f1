-- Raises a fencing counter to at least a value (never lowers it).
-- KEYS[1] token: fencing counter; ARGV[1] value: the value.
-- Reply: the counter afterwards.
local current = tonumber(redis.call('get', KEYS[1]) or 0)
local wanted = tonumber(ARGV[1])
if current < wanted then
    redis.call('set', KEYS[1], ARGV[1])
    return wanted
end
return current
