-- A client's waiter for a mutex gives up: the client's registration goes while it names
-- this acquisition, and so does an offer of the lock to the client; a hold handed over
-- to this acquisition and not taken up (see hand_over) ends; if the lock is then free,
-- the next waiter is handed it or woken (this client may have been the one a release
-- told, and that wake-up must not be lost with it).
-- KEYS[1] lock: lock hash; KEYS[2] waiting: waiting clients and KEYS[3] reservation:
-- reservation (see wake_mutex_waiters); KEYS[4] requests: the waiting clients'
-- acquisitions (see hand_over); KEYS[5] token: fencing counter; KEYS[6] epoch: restart
-- epoch. ARGV[1] wake_id: the client's wake id; ARGV[2] channel: channel; ARGV[3]
-- publish: publish command; ARGV[4] numsub: listener count subcommand of PUBSUB ('' to
-- tell every listener); ARGV[5] offer_ms: how long the lock is offered to a client woken
-- alone (ms); ARGV[6] quarantine_ms: restart quarantine (ms, '0' off); ARGV[7]
-- acquisition: the acquisition's request id; ARGV[8] field: its owner's field; ARGV[9]
-- latch_ms: how long an ended grant's latch lives (ms); ARGV[10] mode: 'write' for a
-- writer of a read-write
-- lock (its field is '<owner>:write'; writers wait as a mutex's waiters do, without
-- reservations), else ''.
-- Reply: 1 if the client was registered for this acquisition, else 0.
local removed = 0
local entry = redis.call('hget', KEYS[4], ARGV[1])
if not entry or string.sub(entry, 1, #ARGV[7] + 1) == ARGV[7] .. ':' then
    -- A client's entry names the acquisition that asked last: a later waiter of the
    -- same client keeps the client's place.
    removed = redis.call('zrem', KEYS[2], ARGV[1])
    redis.call('hdel', KEYS[4], ARGV[1])
end
local reserved = redis.call('get', KEYS[3])
if reserved and string.sub(reserved, -#ARGV[1]) == ARGV[1] then
    redis.call('del', KEYS[3])
end
end_acquisition(KEYS[1], ARGV[8], ARGV[7], ARGV[9])
if redis.call('exists', KEYS[1]) == 0 then
    local m = {
        lock = KEYS[1], waiting = KEYS[2], reservation = KEYS[3], requests = KEYS[4],
        token = KEYS[5], epoch = KEYS[6], channel = ARGV[2], publish = ARGV[3],
        numsub = ARGV[4], offer_ms = ARGV[5], quarantine_ms = ARGV[6],
    }
    if ARGV[10] == 'write' then
        m.reservation, m.mode, m.everybody = nil, 'write', '1'
    end
    wake_mutex_waiters(m)
end
return removed
