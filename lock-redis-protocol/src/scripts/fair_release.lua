-- Ends one grant of the fair lock; the last hold hands the lock over to the first waiter,
-- or wakes it (see hand_fair_lock).
-- KEYS[1] lock: lock hash; KEYS[2] queue: waiter queue; KEYS[3] deadlines: Redisson's
-- waiter scores; KEYS[4] alive: our waiters' liveness; KEYS[5] token: fencing counter;
-- KEYS[6] epoch: restart epoch; KEYS[7] grants: the owner's grants hash; KEYS[8] latch:
-- the grant's latch. ARGV[1] lease_ms: lease (ms); ARGV[2] owner: owner; ARGV[3]
-- channel_prefix: channel prefix (a waiter listens on '<prefix>:<owner>'); ARGV[4]
-- publish: publish command; ARGV[5] quarantine_ms: restart quarantine (ms, '0' off);
-- ARGV[6] slot_ms: Redisson's wait slot (ms); ARGV[7] grant: the grant's id; ARGV[8]
-- latch_ms: latch
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
