-- Ends one grant of the fair lock; the last hold wakes the first waiter only.
-- KEYS[1] lock hash; KEYS[2] waiter queue; KEYS[3] Redisson's waiter scores; KEYS[4] our
-- waiters' liveness; KEYS[5] the owner's grants hash; KEYS[6] the grant's latch.
-- ARGV[1] lease (ms); ARGV[2] owner; ARGV[3] channel prefix (a waiter listens on
-- '<prefix>:<owner>'); ARGV[4] publish command; ARGV[5] the grant's id; ARGV[6] latch
-- lifetime (ms).
-- Reply: -1 not held (the grant is not alive; nothing changed); 0 released; n > 0 holds
-- left.

local settled = release_exclusive()
if settled then
    return settled
end
local head = prune(KEYS[2], KEYS[3], KEYS[4], now_ms())
if head then
    redis.call(ARGV[4], ARGV[3] .. ':' .. head, '0')
end
return released(0)
