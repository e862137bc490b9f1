-- Deletes a lock whoever holds it and wakes its waiters.
-- KEYS[1] lock: lock hash; ARGV[1] channel: channel; ARGV[2] publish: publish command.
-- Reply: 1 when a lock was deleted, 0 when it was free.
if not lock_exists(KEYS[1]) then
    return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[2], ARGV[1], '0')
return 1
