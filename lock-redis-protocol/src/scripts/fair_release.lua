-- Releases one hold of the fair lock; the last one wakes the first waiter only.
-- KEYS[1] lock hash; KEYS[2] waiter queue; KEYS[3] Redisson's waiter scores; KEYS[4] our
-- waiters' liveness; KEYS[5] release latch; KEYS[6] grant latch to undo.
-- ARGV[1] lease (ms); ARGV[2] owner; ARGV[3] channel prefix (a waiter listens on
-- '<prefix>:<owner>'); ARGV[4] publish command; ARGV[5] latch lifetime (ms); ARGV[6] '1'
-- to release only the grant remembered in KEYS[5].
-- Reply: -1 not held (nothing changed); 0 released; n > 0 holds left.

local before = release_replayed()
if before then
    return before
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return released(-1)
end
local holds = drop_hold(KEYS[1], ARGV[2], ARGV[1])
if holds > 0 then
    return released(holds)
end
redis.call('del', KEYS[1])
local head = prune(KEYS[2], KEYS[3], KEYS[4], now_ms())
if head then
    redis.call(ARGV[4], ARGV[3] .. ':' .. head, '0')
end
return released(0)
