-- Ends one grant of an owner (see record_grant).
-- KEYS[1] lock hash; KEYS[2] waiting clients and KEYS[3] reservation (see
-- wake_mutex_waiters); KEYS[4] the owner's grants hash; KEYS[5] the grant's latch;
-- ARGV[1] lease (ms); ARGV[2] owner; ARGV[3] channel;
-- ARGV[4] publish command ('publish' or 'spublish'); ARGV[5] listener count subcommand
-- of PUBSUB ('numsub', 'shardnumsub', or '' to tell every listener); ARGV[6] how long
-- the lock is offered to a client woken alone (ms); ARGV[7] the grant's id; ARGV[8]
-- latch lifetime (ms).
-- Reply: -1 not held (the grant is not alive; nothing changed); 0 released (waiters
-- notified); n > 0 holds left.
local settled = release_exclusive()
if settled then
    return settled
end
wake_mutex_waiters(KEYS[2], ARGV[3], ARGV[4], ARGV[5], KEYS[3], ARGV[6])
return released(0)
