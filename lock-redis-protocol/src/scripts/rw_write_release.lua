-- Ends one write grant. The last one frees the lock, or, when the writer also holds
-- read holds (a downgrade), turns it into a read lock. A read lock wakes every waiter
-- ('1'), since any number of readers may now enter; a free lock is handed over to the
-- waiting writer registered first, or every waiter is woken (see wake_mutex_waiters).
-- KEYS[1] lock: lock hash; KEYS[2] waiting: waiting clients (see wake_mutex_waiters);
-- KEYS[3] requests: the waiting clients' acquisitions (see hand_over); KEYS[4] token:
-- fencing counter; KEYS[5] epoch: restart epoch; KEYS[6] grants: the writer's grants
-- hash; KEYS[7] latch: the grant's latch. ARGV[1] lease_ms: lease (ms); ARGV[2] owner:
-- owner; ARGV[3] channel: channel; ARGV[4] publish: publish command; ARGV[5] numsub:
-- listener count subcommand of PUBSUB ('' to tell every listener); ARGV[6] quarantine_ms:
-- restart quarantine (ms, '0' off); ARGV[7] grant: the grant's id; ARGV[8] latch_ms:
-- latch lifetime (ms).
-- Reply: -1 not held (the grant is not alive; nothing changed); 0 released; n > 0 holds
-- left.
local before = release_replayed()
if before then
    return before
end
local writer = ARGV[2] .. ':write'
if redis.call('hget', KEYS[1], 'mode') ~= 'write' then
    return released(-1)
end
local holds = end_exclusive_grant(KEYS[1], writer, ARGV[1])
if not holds then
    return released(-1)
end
if holds > 0 then
    return released(holds)
end
redis.call('del', KEYS[6])
redis.call('hdel', KEYS[1], writer)
if redis.call('hlen', KEYS[1]) == 1 then
    redis.call('del', KEYS[1])
    wake_mutex_waiters({
        lock = KEYS[1], waiting = KEYS[2], requests = KEYS[3], token = KEYS[4],
        epoch = KEYS[5], channel = ARGV[3], publish = ARGV[4], numsub = ARGV[5],
        quarantine_ms = ARGV[6], mode = 'write', everybody = '1',
    })
else
    redis.call('hset', KEYS[1], 'mode', 'read')
    redis.call(ARGV[4], ARGV[3], '1')
end
return released(0)
