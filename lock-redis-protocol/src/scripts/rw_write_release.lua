-- Ends one write grant. The last one frees the lock, or, when the writer also holds
-- read holds (a downgrade), turns it into a read lock; either way every waiter is woken
-- ('1'), since any number of readers may now enter.
-- KEYS[1] lock hash; KEYS[2] the writer's grants hash; KEYS[3] the grant's latch.
-- ARGV[1] lease (ms); ARGV[2] owner; ARGV[3] channel; ARGV[4] publish command;
-- ARGV[5] the grant's id; ARGV[6] latch lifetime (ms).
-- Reply: -1 not held (the grant is not alive; nothing changed); 0 released; n > 0 holds
-- left.
local before = release_replayed()
if before then
    return before
end
local writer = ARGV[2] .. ':write'
if redis.call('hget', KEYS[1], 'mode') ~= 'write' then
    return released(-1)
end
local holds = end_exclusive_grant(KEYS[1], writer, ARGV[1])
if not holds then
    return released(-1)
end
if holds > 0 then
    return released(holds)
end
redis.call('del', KEYS[2])
redis.call('hdel', KEYS[1], writer)
if redis.call('hlen', KEYS[1]) == 1 then
    redis.call('del', KEYS[1])
else
    redis.call('hset', KEYS[1], 'mode', 'read')
end
redis.call(ARGV[4], ARGV[3], '1')
return released(0)
