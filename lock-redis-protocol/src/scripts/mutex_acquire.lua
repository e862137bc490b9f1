-- Takes the lock, or one more hold of it, for an owner.
-- KEYS[1] lock: lock hash; KEYS[2] reservation: reservation string '<wait start
-- ms>:<owner>', or '<ms>:<wake id>' while a release offers the lock to one client (see
-- wake_mutex_waiters); KEYS[3] token: fencing counter; KEYS[4] epoch: restart epoch;
-- KEYS[5] waiting: waiting clients (see wake_mutex_waiters); KEYS[6] requests: the
-- waiting clients' acquisitions (see hand_over); KEYS[7] grants: the owner's grants hash;
-- KEYS[8] latch: grant latch. ARGV[1] lease_ms: lease (ms); ARGV[2] owner: owner; ARGV[3]
-- starving: '1' if the caller is a starving waiter; ARGV[4] reservation_ms: how long a
-- reservation lasts (ms); ARGV[5] waited_ms: how long the caller has waited (ms); ARGV[6]
-- fencing: '1' to return a fencing token; ARGV[7] quarantine_ms: restart quarantine (ms,
-- '0' off); ARGV[8] wake_id: the caller's client wake id when the caller waits if busy,
-- else ''; ARGV[9] registered_ms: how long the waiting clients' zset outlives a
-- registration (ms); ARGV[10] place_ms: how long the caller keeps its place without
-- asking again (ms): a lock handed over to it lasts that long (or its lease, if shorter)
-- until it takes it up; ARGV[11] attempt: which attempt of its acquisition this is (named
-- to the waiter when the lock is handed over to it); ARGV[12] grant: this request's id,
-- the grant's, the same for every attempt of one acquisition; ARGV[13] latch_ms: grant
-- latch lifetime (ms): a retry of this request gets the same
-- grant back.
-- The expiry is only ever extended, never shortened, so that a client's local view of
-- its lease (the latest request it sent plus that request's lease) stays on the safe side.
-- Reply: '<holds>:<token>:<origin>' when the owner now holds it (token 0 without fencing; a
-- reentry reports the current counter, which is the holder's own token); {0, pttl} when
-- someone else does (for a registered waiter at most a third of its place: a lock
-- handed to a waiter that stalled is free again after one place);
-- {2, pttl of the reservation} when it is free but reserved for another owner; {4, ms}
-- while the restart quarantine lasts; {5, 0} when this acquisition is over (its grant
-- ended, or it gave up): it is granted nothing more.

local again = grant_replayed()
if type(again) == 'table' then
    -- The acquisition is over.
    return again
end
-- Nothing is granted during the restart quarantine, nor found again: the hold found may
-- be one whose release, or revocation, the restart lost (the protocol's rules).
local quarantined = quarantine_left(KEYS[4], ARGV[7])
if quarantined > 0 then
    return {4, quarantined}
end
if again then
    -- Granted before, or handed over while it waited (see hand_over).
    return find_grant(KEYS[1], ARGV[2], ARGV[1])
end

-- The reservation's wait start and owner (a malformed one counts as absent), and whether
-- the key exists at all.
local function reservation()
    local value = redis.call('get', KEYS[2])
    if not value then
        return nil, nil, false
    end
    local sep = string.find(value, ':', 1, true)
    if not sep then
        return nil, nil, true
    end
    return tonumber(string.sub(value, 1, sep - 1)), string.sub(value, sep + 1), true
end

-- What a registered waiter leaves in the waiting clients' acquisitions (see hand_over).
local function waiting_request()
    return ARGV[12] .. ':' .. ARGV[6] .. ':' .. ARGV[10] .. ':' .. ARGV[13] .. ':' .. ARGV[11]
        .. ':' .. ARGV[1] .. ':' .. ARGV[2]
end

if redis.call('exists', KEYS[1]) == 0 then
    local _, reserved_for, reserved = reservation()
    -- A caller that does not register (a try, or a part of a composite lock) is one of
    -- the listeners a release offers the lock to when it offers it to others.
    local offered_to_caller = reserved_for == ARGV[2] or reserved_for == ARGV[8]
        or (reserved_for == others() and ARGV[8] == '')
    if reserved_for and not offered_to_caller then
        register_waiting(KEYS[5], KEYS[6], ARGV[8], ARGV[9], waiting_request())
        return {2, redis.call('pttl', KEYS[2])}
    end
    -- Taken up (or malformed): it goes. Most grants find none, and skip the call.
    if reserved then
        redis.call('del', KEYS[2])
    end
    if ARGV[8] ~= '' and ARGV[11] ~= '1' then
        -- Served: the client's next waiter registers afresh, behind the others. (An
        -- acquisition's first attempt has not registered, and the client's earlier
        -- waiters for the lock left or were served: nothing to remove.)
        redis.call('zrem', KEYS[5], ARGV[8])
        redis.call('hdel', KEYS[6], ARGV[8])
    end
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    local origin, sole = record_grant(true, ARGV[1])
    local token = 0
    if ARGV[6] == '1' then
        token = next_token(KEYS[3])
    end
    return granted(1, token, origin, sole)
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    local holds = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    -- Extend only: a reentry with a shorter lease must not cut an outer hold's lease.
    if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
        redis.call('pexpire', KEYS[1], ARGV[1])
    end
    local origin, sole = record_grant(false, ARGV[1])
    local token = 0
    if ARGV[6] == '1' then
        token = tonumber(redis.call('get', KEYS[3]) or 0)
    end
    return granted(holds, token, origin, sole)
end
-- Busy. While the lock is offered to the clients of other libraries (see the prelude's
-- wake_mutex_waiters), one of them has taken it: the offer is used up, and the next
-- release races as Redisson's always did.
local reserved_start, reserved_for = reservation()
if reserved_for == others() then
    redis.call('del', KEYS[2])
    reserved_start, reserved_for = nil, nil
end
-- Busy. A caller that will wait registers its client (which keeps its place if it is
-- registered already), so that a release can wake this client alone and in its turn.
register_waiting(KEYS[5], KEYS[6], ARGV[8], ARGV[9], waiting_request())
-- A starving waiter reserves the next free moment unless a waiter that started
-- waiting earlier holds the reservation; its own reservation is refreshed on every attempt.
-- Wait starts are on the server's clock (now minus the caller's own waited time), so
-- clients need no synchronised clocks. A registered client's waiter reserves only while
-- its client is first among the registered (a release offers the lock to that one: a
-- reservation must not jump the line it keeps while its waiter sleeps).
if ARGV[3] == '1' then
    local start = now_ms() - tonumber(ARGV[5])
    if (not reserved_for or reserved_for == ARGV[2] or start < reserved_start)
        and registered_first(KEYS[5], ARGV[8]) then
        redis.call('set', KEYS[2], start .. ':' .. ARGV[2], 'px', ARGV[4])
    end
end
local ttl = redis.call('pttl', KEYS[1])
if ARGV[8] ~= '' then
    ttl = asks_again_within(ttl, ARGV[10])
end
return {0, ttl}
