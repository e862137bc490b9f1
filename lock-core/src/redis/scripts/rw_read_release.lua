-- Releases one read hold.
-- KEYS[1] lock hash; ARGV[1] owner; ARGV[2] channel; ARGV[3] publish command;
-- ARGV[4] the lock's tagged name (hold keys are '<it>:<owner>:rwlock_timeout:<n>').
-- The lock lives as long as its longest live read hold, so a crashed reader's holds stop
-- counting when their own leases end. When no hold is left the lock is deleted and one
-- waiter is woken ('0').
-- Reply: -1 not held (nothing changed); 0 this owner's last read hold went; n > 0 left.
local mode = redis.call('hget', KEYS[1], 'mode')
local holds = tonumber(redis.call('hget', KEYS[1], ARGV[1]))
if mode == false or not holds then
    return -1
end
local function hold_key(owner, n)
    return ARGV[4] .. ':' .. owner .. ':rwlock_timeout:' .. n
end
redis.call('del', hold_key(ARGV[1], holds))
holds = holds - 1
if holds == 0 then
    redis.call('hdel', KEYS[1], ARGV[1])
else
    redis.call('hset', KEYS[1], ARGV[1], holds)
end
if mode == 'write' then
    -- The writer's own read hold: the write hold keeps the lock and its lease.
    return holds
end
local longest = 0
local fields = redis.call('hgetall', KEYS[1])
for i = 1, #fields, 2 do
    local count = tonumber(fields[i + 1])
    if fields[i] ~= 'mode' and count then
        for n = 1, count do
            longest = math.max(longest, redis.call('pttl', hold_key(fields[i], n)))
        end
    end
end
if longest > 0 then
    redis.call('pexpire', KEYS[1], longest)
    return holds
end
redis.call('del', KEYS[1])
redis.call(ARGV[3], ARGV[2], '0')
return holds
