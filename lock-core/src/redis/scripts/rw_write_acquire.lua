-- Takes the write hold of a read-write lock, or one more of it.
-- KEYS[1] lock hash; KEYS[2] fencing counter; KEYS[3] restart epoch.
-- ARGV[1] lease (ms); ARGV[2] owner (the writer's field is '<owner>:write');
-- ARGV[3] '1' to return a fencing token; ARGV[4] restart quarantine (ms, '0' off).
-- Reply: {1, holds, token} when held; {0, pttl} when busy; {3, 0} when the owner holds
-- the read lock (an upgrade would wait for itself forever).
local quarantined = quarantine_left(KEYS[3], ARGV[4])
if quarantined > 0 then
    return {0, quarantined}
end
local mode = redis.call('hget', KEYS[1], 'mode')
local writer = ARGV[2] .. ':write'
local function token(fresh)
    if ARGV[3] ~= '1' then
        return 0
    end
    if fresh then
        return next_token(KEYS[2])
    end
    return tonumber(redis.call('get', KEYS[2]) or 0)
end
if mode == false then
    redis.call('hset', KEYS[1], 'mode', 'write', writer, 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {1, 1, token(true)}
end
if mode == 'write' and redis.call('hexists', KEYS[1], writer) == 1 then
    local holds = redis.call('hincrby', KEYS[1], writer, 1)
    if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
        redis.call('pexpire', KEYS[1], ARGV[1])
    end
    return {1, holds, token(false)}
end
if mode == 'read' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    return {3, 0}
end
return {0, redis.call('pttl', KEYS[1])}
