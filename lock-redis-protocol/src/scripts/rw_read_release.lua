-- Ends one read grant.
-- KEYS[1] lock: lock hash; KEYS[2] waiting: waiting clients (see wake_mutex_waiters);
-- KEYS[3] requests: the waiting clients' acquisitions (see hand_over); KEYS[4] token:
-- fencing counter; KEYS[5] epoch: restart epoch; KEYS[6] grants: the reader's grants
-- hash; KEYS[7] latch: the grant's latch. ARGV[1] owner: owner; ARGV[2] channel: channel;
-- ARGV[3] publish: publish command; ARGV[4] tagged_name: the lock's tagged name (hold
-- keys are '<it>:<owner>:rwlock_timeout:<n>'); ARGV[5] numsub: listener count subcommand
-- of PUBSUB ('' to tell every listener); ARGV[6] quarantine_ms: restart quarantine (ms,
-- '0' off); ARGV[7] grant: the grant's id; ARGV[8] latch_ms: latch lifetime (ms).
-- The lock lives as long as its longest live read hold, so a crashed reader's holds stop
-- counting when their own leases end; it never expires before a live hold of the owner
-- (see drop_read: the hold keys' expiries, sorted, stay at or above the live grants'
-- expiries, sorted, whichever grant ends). When no hold is left the lock is deleted, and
-- handed over to the waiting writer registered first or one waiter is woken ('0'; see
-- wake_mutex_waiters).
-- Reply: -1 not held (the grant is not alive; nothing changed); 0 this owner's last read
-- hold went; n > 0 left.
local before = release_replayed()
if before then
    return before
end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    return released(-1)
end
local function prefix(owner)
    return ARGV[4] .. ':' .. owner .. ':rwlock_timeout'
end
if not grant_alive(now_ms()) then
    return released(-1)
end
local holds = live_reads(KEYS[1], ARGV[1], prefix(ARGV[1]))
if holds == 0 then
    return released(-1)
end
holds = drop_read(KEYS[1], ARGV[1], prefix(ARGV[1]), holds)
if holds == 0 then
    redis.call('del', KEYS[6])
else
    redis.call('hdel', KEYS[6], ARGV[7])
end
if mode == 'write' then
    -- The writer's own read hold: the write hold keeps the lock and its lease.
    return released(holds)
end
local longest = 0
local fields = redis.call('hgetall', KEYS[1])
for i = 1, #fields, 2 do
    local count = tonumber(fields[i + 1])
    if fields[i] ~= 'mode' and count then
        for n = 1, count do
            longest = math.max(longest, lease_left(prefix(fields[i]) .. ':' .. n))
        end
    end
end
if longest == math.huge then
    redis.call('persist', KEYS[1])
    return released(holds)
end
if longest > 0 then
    redis.call('pexpire', KEYS[1], longest)
    return released(holds)
end
redis.call('del', KEYS[1])
wake_mutex_waiters({
    lock = KEYS[1], waiting = KEYS[2], requests = KEYS[3], token = KEYS[4],
    epoch = KEYS[5], channel = ARGV[2], publish = ARGV[3], numsub = ARGV[5],
    quarantine_ms = ARGV[6], mode = 'write',
})
return released(holds)
