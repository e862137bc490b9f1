-- Reads a lock as one owner sees it.
-- KEYS[1] lock: lock hash; ARGV[1] field: the owner's field (`owner`, or `owner:write`
-- for a writer); ARGV[2] mode: the mode a read-write lock must be in to count as locked
-- ('' for other kinds).
-- Reply: {locked (0/1), holds of the owner, pttl}.
if not lock_exists(KEYS[1]) then
    return {0, 0, -2}
end
local locked = 1
if ARGV[2] ~= '' and redis.call('hget', KEYS[1], 'mode') ~= ARGV[2] then
    locked = 0
end
local holds = tonumber(redis.call('hget', KEYS[1], ARGV[1])) or 0
return {locked, holds, redis.call('pttl', KEYS[1])}
