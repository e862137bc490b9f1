-- Deletes a read-write lock in the given mode whoever holds it, and wakes every waiter.
-- KEYS[1] lock: lock hash; ARGV[1] mode: mode ('read' or 'write'); ARGV[2] channel:
-- channel; ARGV[3] publish: publish command.
-- Reply: 1 when a lock in that mode was deleted, else 0.
if not lock_exists(KEYS[1]) then
    return 0
end
if redis.call('hget', KEYS[1], 'mode') ~= ARGV[1] then
    return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[3], ARGV[2], '1')
return 1
