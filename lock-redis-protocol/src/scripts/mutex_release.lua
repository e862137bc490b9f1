-- Ends one grant of an owner (see record_grant); when the lock is then free, hands it
-- over to the waiting client registered first or wakes its waiters (see
-- wake_mutex_waiters).
-- KEYS[1] lock: lock hash; KEYS[2] waiting: waiting clients and KEYS[3] reservation:
-- reservation (see wake_mutex_waiters); KEYS[4] requests: the waiting clients'
-- acquisitions (see hand_over); KEYS[5] token: fencing counter; KEYS[6] epoch: restart
-- epoch; KEYS[7] grants: the owner's grants hash; KEYS[8] latch: the grant's latch;
-- ARGV[1] lease_ms: lease (ms); ARGV[2] owner: owner; ARGV[3] channel: channel; ARGV[4]
-- publish: publish command ('publish' or 'spublish'); ARGV[5] numsub: listener count
-- subcommand of PUBSUB ('numsub', 'shardnumsub', or '' to tell every listener); ARGV[6]
-- offer_ms: how long the lock is offered to a client woken alone (ms); ARGV[7]
-- quarantine_ms: restart quarantine (ms, '0' off); ARGV[8] grant: the grant's id; ARGV[9]
-- latch_ms: latch lifetime (ms).
-- Reply: -1 not held (the grant is not alive; nothing changed); 0 released (handed over
-- or waiters notified); n > 0 holds left.
local settled = release_exclusive()
if settled then
    return settled
end
wake_mutex_waiters({
    lock = KEYS[1], waiting = KEYS[2], reservation = KEYS[3], requests = KEYS[4],
    token = KEYS[5], epoch = KEYS[6], channel = ARGV[3], publish = ARGV[4],
    numsub = ARGV[5], offer_ms = ARGV[6], quarantine_ms = ARGV[7],
})
return released(0)
