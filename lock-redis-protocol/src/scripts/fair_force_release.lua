-- Deletes the fair lock whoever holds it and wakes the first waiter.
-- KEYS[1] lock: lock hash; KEYS[2] queue: waiter queue; KEYS[3] deadlines: Redisson's
-- waiter scores; KEYS[4] alive: our waiters' liveness. ARGV[1] channel_prefix: channel
-- prefix; ARGV[2] publish: publish command.
-- Reply: 1 when a lock was deleted, 0 when it was free.

if not lock_exists(KEYS[1]) then
    return 0
end
redis.call('del', KEYS[1])
local head = prune(KEYS[2], KEYS[3], KEYS[4], now_ms())
if head then
    redis.call(ARGV[2], ARGV[1] .. ':' .. head, '0')
end
return 1
