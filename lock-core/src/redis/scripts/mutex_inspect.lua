-- Reads a lock as one owner sees it.
-- KEYS[1] lock hash; ARGV[1] owner.
-- Reply: {locked (0/1), holds of the owner, pttl}.
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'none' then
    return {0, 0, -2}
end
if kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE the lock key holds a ' .. kind)
end
local holds = tonumber(redis.call('hget', KEYS[1], ARGV[1])) or 0
return {1, holds, redis.call('pttl', KEYS[1])}
