-- Releases one hold of an owner.
-- KEYS[1] lock hash; ARGV[1] lease (ms); ARGV[2] owner; ARGV[3] channel;
-- ARGV[4] publish command ('publish' or 'spublish').
-- Reply: -1 not held (nothing changed); 0 released (waiters notified); n > 0 holds left.
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return -1
end
local holds = drop_hold(KEYS[1], ARGV[2], ARGV[1])
if holds > 0 then
    return holds
end
redis.call('del', KEYS[1])
redis.call(ARGV[4], ARGV[3], '0')
return 0
