-- Ends one grant of the fair lock; the last hold hands the lock over to the first waiter,
-- or wakes it (see hand_fair_lock).
-- KEYS[1] lock hash; KEYS[2] waiter queue; KEYS[3] Redisson's waiter scores; KEYS[4] our
-- waiters' liveness; KEYS[5] fencing counter; KEYS[6] restart epoch; KEYS[7] the owner's
-- grants hash; KEYS[8] the grant's latch.
-- ARGV[1] lease (ms); ARGV[2] owner; ARGV[3] channel prefix (a waiter listens on
-- '<prefix>:<owner>'); ARGV[4] publish command; ARGV[5] restart quarantine (ms, '0'
-- off); ARGV[6] Redisson's wait slot (ms); ARGV[7] the grant's id; ARGV[8] latch
-- lifetime (ms).
-- Reply: -1 not held (the grant is not alive; nothing changed); 0 released (handed over
-- or the first waiter woken); n > 0 holds left.

local settled = release_exclusive()
if settled then
    return settled
end
hand_fair_lock({
    lock = KEYS[1], queue = KEYS[2], deadlines = KEYS[3], alive = KEYS[4], token = KEYS[5],
    epoch = KEYS[6], prefix = ARGV[3], publish = ARGV[4], quarantine_ms = ARGV[5],
    slot = tonumber(ARGV[6]),
})
return released(0)
