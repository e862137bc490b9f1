-- A waiter of the fair lock gives up: it leaves the queue (the Redisson scores of those
-- behind it move one slot closer, as Redisson does), a hold handed over to this
-- acquisition and not taken up, or granted to a late copy of one of its attempts, ends
-- (see end_acquisition), and if the lock is then free the next waiter is handed it or
-- woken.
-- Only its own: when the owner's place in the queue is a later acquisition's (the
-- cancellation came late, after the owner asked again), the place stays.
-- KEYS[1] lock: lock hash; KEYS[2] queue: waiter queue; KEYS[3] deadlines: Redisson's
-- waiter scores; KEYS[4] alive: our waiters' liveness; KEYS[5] token: fencing counter;
-- KEYS[6] epoch: restart epoch. ARGV[1] owner: owner; ARGV[2] channel_prefix: channel
-- prefix; ARGV[3] publish: publish command; ARGV[4] slot_ms: Redisson's wait slot (ms);
-- ARGV[5] quarantine_ms: restart quarantine (ms, '0' off); ARGV[6] acquisition: the
-- acquisition's request id; ARGV[7] latch_ms: how long an ended grant's latch lives (ms).
-- Reply: 1 if the acquisition left the queue, else 0.

local placed = placed_by(redis.call('hget', KEYS[4], ARGV[1]))
local removed = 0
if not placed or placed == ARGV[6] then
    removed = leave_queue(KEYS[2], KEYS[3], KEYS[4], ARGV[1], tonumber(ARGV[4]))
end
end_acquisition(KEYS[1], ARGV[1], ARGV[6], ARGV[7])
-- A lock free after the cancellation goes to the next waiter (the protocol's rules).
if redis.call('exists', KEYS[1]) == 0 then
    hand_fair_lock({
        lock = KEYS[1], queue = KEYS[2], deadlines = KEYS[3], alive = KEYS[4],
        token = KEYS[5], epoch = KEYS[6], prefix = ARGV[2], publish = ARGV[3],
        quarantine_ms = ARGV[5], slot = tonumber(ARGV[4]),
    })
end
if removed > 0 then
    return 1
end
return 0
