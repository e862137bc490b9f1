-- Releases one hold of an owner.
-- KEYS[1] lock hash; KEYS[2] waiting clients and KEYS[3] reservation (see
-- wake_mutex_waiters); KEYS[4] release latch; KEYS[5] grant latch to undo;
-- ARGV[1] lease (ms); ARGV[2] owner; ARGV[3] channel;
-- ARGV[4] publish command ('publish' or 'spublish'); ARGV[5] listener count subcommand
-- of PUBSUB ('numsub', 'shardnumsub', or '' to tell every listener); ARGV[6] how long
-- the lock is offered to a client woken alone (ms); ARGV[7] latch lifetime (ms);
-- ARGV[8] '1' to release only the grant remembered in KEYS[5] (see release_replayed).
-- Reply: -1 not held (nothing changed); 0 released (waiters notified); n > 0 holds left.
local settled = release_exclusive()
if settled then
    return settled
end
wake_mutex_waiters(KEYS[2], ARGV[3], ARGV[4], ARGV[5], KEYS[3], ARGV[6])
return released(0)
