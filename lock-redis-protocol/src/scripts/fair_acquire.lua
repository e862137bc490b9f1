-- Takes the fair lock, or one more hold of it, in queue order.
-- KEYS[1] lock: lock hash; KEYS[2] queue: waiter queue (list of owners); KEYS[3]
-- deadlines: Redisson's waiter scores (zset owner -> ms); KEYS[4] alive: our waiters'
-- liveness (hash owner -> server ms); KEYS[5] token: fencing counter; KEYS[6] epoch:
-- restart epoch; KEYS[7] grants: the owner's grants hash; KEYS[8] latch: grant latch.
-- ARGV[1] lease_ms: lease (ms); ARGV[2] owner: owner; ARGV[3] joins: '1' to join the
-- queue when busy; ARGV[4] place_ms: waiter timeout (ms): a queued waiter that has not
-- asked again for this long is skipped; ARGV[5] fencing: '1' to return a fencing token;
-- ARGV[6] quarantine_ms: restart quarantine (ms); ARGV[7] slot_ms: Redisson's wait slot
-- (ms); ARGV[8] attempt: which attempt of its acquisition this is (named to the waiter
-- when the lock is handed over to it; see hand_fair_lock); ARGV[9] grant: this request's
-- id, the grant's, the same for every attempt of one acquisition; ARGV[10] latch_ms:
-- grant latch lifetime (ms): a retry of this request gets the same grant back.
-- Deadlines come from the server's clock, so clients need no synchronised clocks.
-- Reply: '<holds>:<token>:<origin>' when held; {0, ms} when not: ms is the longest the caller
-- should wait for a message before asking again; {4, ms} while the restart quarantine
-- lasts; {5, 0} when this acquisition is over (its grant ended, or it gave up).

local again = grant_replayed()
if type(again) == 'table' then
    -- The acquisition is over.
    return again
end
-- Nothing is granted during the restart quarantine, nor found again: the hold found may
-- be one whose release, or revocation, the restart lost (the protocol's rules).
local quarantined = quarantine_left(KEYS[6], ARGV[6])
if quarantined > 0 then
    return {4, quarantined}
end
if again then
    -- Granted before, or handed over while it waited (see hand_fair_lock).
    return find_grant(KEYS[1], ARGV[2], ARGV[1])
end
local now = now_ms()
local slot = tonumber(ARGV[7])
local head = prune(KEYS[2], KEYS[3], KEYS[4], now)
local function token(fresh)
    if ARGV[5] ~= '1' then
        return 0
    end
    if fresh then
        return next_token(KEYS[5])
    end
    return tonumber(redis.call('get', KEYS[5]) or 0)
end

if redis.call('exists', KEYS[1]) == 0 then
    if not head or head == ARGV[2] then
        if head then
            redis.call('lpop', KEYS[2])
            -- As Redisson does: everyone behind moves one slot closer.
            advance_scores(KEYS[2], KEYS[3], 0, slot)
        end
        redis.call('zrem', KEYS[3], ARGV[2])
        redis.call('hdel', KEYS[4], ARGV[2])
        redis.call('hincrby', KEYS[1], ARGV[2], 1)
        redis.call('pexpire', KEYS[1], ARGV[1])
        local origin, sole = record_grant(true, ARGV[1])
        return granted(1, token(true), origin, sole)
    end
elseif redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    local holds = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
        redis.call('pexpire', KEYS[1], ARGV[1])
    end
    local origin, sole = record_grant(false, ARGV[1])
    return granted(holds, token(false), origin, sole)
end

-- Busy, or free while another waiter is first. A waiting caller takes (or keeps) its
-- place: its liveness deadline moves on every attempt, so only a waiter that stopped
-- asking lapses. Its Redisson score is set the way Redisson sets a waiter's (the last
-- waiter's score, or now plus the lock's ttl, plus one slot) and only ever raised to
-- one slot from now, so that Redisson's clients, which prune by score and move scores
-- back one slot per departure, keep it in its place too.
local timeout = tonumber(ARGV[4])
local queued = redis.call('zscore', KEYS[3], ARGV[2])
if queued or ARGV[3] == '1' then
    if not queued then
        local last = redis.call('lindex', KEYS[2], -1)
        local base = last and tonumber(redis.call('zscore', KEYS[3], last))
        if not base then
            base = now + math.max(0, redis.call('pttl', KEYS[1]))
        end
        redis.call('rpush', KEYS[2], ARGV[2])
        redis.call('zadd', KEYS[3], base + slot, ARGV[2])
    elseif tonumber(queued) < now + slot then
        redis.call('zadd', KEYS[3], now + slot, ARGV[2])
    end
    -- Its liveness entry also names this acquisition, for a release to hand it the lock.
    redis.call('hset', KEYS[4], ARGV[2], string.format('%d:', now + timeout) .. ARGV[9] .. ':'
        .. ARGV[5] .. ':' .. ARGV[4] .. ':' .. ARGV[8] .. ':' .. ARGV[10] .. ':' .. ARGV[1])
    keep_queue(KEYS[2], KEYS[3], KEYS[4], timeout)
end
local sleep = redis.call('pttl', KEYS[1])
if sleep < 0 then
    -- Free: the first waiter either takes it or lapses at its deadline.
    head = redis.call('lindex', KEYS[2], 0)
    sleep = timeout
    if head then
        local deadline = alive_until(redis.call('hget', KEYS[4], head))
            or tonumber(redis.call('zscore', KEYS[3], head))
            or now
        sleep = math.max(1, deadline - now)
    end
end
if queued or ARGV[3] == '1' then
    -- Ask again in time to keep the place.
    sleep = math.min(sleep, math.max(1, math.floor(timeout / 3)))
end
return {0, sleep}
