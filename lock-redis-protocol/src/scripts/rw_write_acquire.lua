-- Takes the write hold of a read-write lock, or one more of it.
-- KEYS[1] lock: lock hash; KEYS[2] token: fencing counter; KEYS[3] epoch: restart epoch;
-- KEYS[4] waiting: waiting clients (see wake_mutex_waiters: writers wait as a mutex's
-- waiters do); KEYS[5] requests: the waiting clients' acquisitions (see hand_over);
-- KEYS[6] grants: the writer's grants hash; KEYS[7] latch: grant latch. ARGV[1] lease_ms:
-- lease (ms); ARGV[2] owner: owner (the writer's field is '<owner>:write'); ARGV[3]
-- fencing: '1' to return a fencing token; ARGV[4] quarantine_ms: restart quarantine (ms,
-- '0' off); ARGV[5] hold_prefix: the owner's read-hold key prefix
-- ('{name}:<owner>:rwlock_timeout'); ARGV[6] wake_id: the caller's client wake id when
-- the caller waits if busy, else ''; ARGV[7] registered_ms: how long the waiting clients'
-- zset outlives a registration (ms); ARGV[8] place_ms: how long the caller keeps its
-- place without asking again (ms): a lock handed over to it lasts that long (or its
-- lease, if shorter) until it takes it up; ARGV[9] attempt: which attempt of its
-- acquisition this is; ARGV[10] grant: this request's id, the grant's, the same for every
-- attempt of one acquisition; ARGV[11] latch_ms: grant latch lifetime (ms): a retry of
-- this
-- request gets the same grant back.
-- Reply: '<holds>:<token>:<origin>' when held; {0, pttl} when busy (for a registered
-- waiter at most a third of its place); {3, 0} when the owner holds the read lock (an
-- upgrade would wait for itself forever); {4, ms} while the restart quarantine lasts;
-- {5, 0} when this acquisition is over (its grant ended, or it gave up).
local again = grant_replayed()
if type(again) == 'table' then
    -- The acquisition is over.
    return again
end
-- Nothing is granted during the restart quarantine, nor found again: the hold found may
-- be one whose release, or revocation, the restart lost (the protocol's rules).
local quarantined = quarantine_left(KEYS[3], ARGV[4])
if quarantined > 0 then
    return {4, quarantined}
end
if again then
    -- Granted before, or handed over while it waited (see hand_over).
    return find_grant(KEYS[1], ARGV[2] .. ':write', ARGV[1])
end
local mode = redis.call('hget', KEYS[1], 'mode')
local writer = ARGV[2] .. ':write'
local function token(fresh)
    if ARGV[3] ~= '1' then
        return 0
    end
    if fresh then
        return next_token(KEYS[2])
    end
    return tonumber(redis.call('get', KEYS[2]) or 0)
end
if mode == 'read' then
    -- Only the owner's live read holds make an upgrade wait for itself; its read holds
    -- whose leases ended are dropped here, and a lock left with no holder is free.
    if live_reads(KEYS[1], ARGV[2], ARGV[5]) > 0 then
        -- The refusal ends the acquisition (its grant's release answers not held): a
        -- late copy of this attempt, once the owner's reads ended, grants nothing.
        released(-1)
        return {3, 0}
    end
    if redis.call('hlen', KEYS[1]) == 1 then
        redis.call('del', KEYS[1])
        mode = false
    end
end
if mode == false then
    if ARGV[6] ~= '' and ARGV[9] ~= '1' then
        -- Served: the client's next writer registers afresh, behind the others (a first
        -- attempt has not registered).
        redis.call('zrem', KEYS[4], ARGV[6])
        redis.call('hdel', KEYS[5], ARGV[6])
    end
    redis.call('hset', KEYS[1], 'mode', 'write', writer, 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    local origin, sole = record_grant(true, ARGV[1])
    return granted(1, token(true), origin, sole)
end
if mode == 'write' and redis.call('hexists', KEYS[1], writer) == 1 then
    local holds = redis.call('hincrby', KEYS[1], writer, 1)
    if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
        redis.call('pexpire', KEYS[1], ARGV[1])
    end
    local origin, sole = record_grant(false, ARGV[1])
    return granted(holds, token(false), origin, sole)
end

-- Busy. A caller that will wait registers its client, so that a release can hand the
-- lock to this acquisition (see hand_over).
register_waiting(KEYS[4], KEYS[5], ARGV[6], ARGV[7], ARGV[10] .. ':' .. ARGV[3] .. ':'
    .. ARGV[8] .. ':' .. ARGV[11] .. ':' .. ARGV[9] .. ':' .. ARGV[1] .. ':' .. writer)
local ttl = redis.call('pttl', KEYS[1])
if ARGV[6] ~= '' then
    ttl = asks_again_within(ttl, ARGV[8])
end
return {0, ttl}
