-- Releases one hold of an owner.
-- KEYS[1] lock hash; KEYS[2] release latch; KEYS[3] grant latch to undo;
-- ARGV[1] lease (ms); ARGV[2] owner; ARGV[3] channel;
-- ARGV[4] publish command ('publish' or 'spublish'); ARGV[5] latch lifetime (ms);
-- ARGV[6] '1' to release only the grant remembered in KEYS[3] (see release_replayed).
-- Reply: -1 not held (nothing changed); 0 released (waiters notified); n > 0 holds left.
local settled = release_exclusive()
if settled then
    return settled
end
redis.call(ARGV[4], ARGV[3], '0')
return released(0)
