-- A waiter of the fair lock gives up: it leaves the queue (the Redisson scores of those
-- behind it move one slot closer, as Redisson does), and if it was first while the lock
-- is free, the next waiter is woken.
-- KEYS[1] lock hash; KEYS[2] waiter queue; KEYS[3] Redisson's waiter scores; KEYS[4] our
-- waiters' liveness.
-- ARGV[1] owner; ARGV[2] channel prefix; ARGV[3] publish command; ARGV[4] Redisson's
-- wait slot (ms).
-- Reply: 1 if the owner was queued, else 0.

local first = redis.call('lindex', KEYS[2], 0)
local removed = leave_queue(KEYS[2], KEYS[3], KEYS[4], ARGV[1], tonumber(ARGV[4]))
if first == ARGV[1] and redis.call('exists', KEYS[1]) == 0 then
    local head = prune(KEYS[2], KEYS[3], KEYS[4], now_ms())
    if head then
        redis.call(ARGV[3], ARGV[2] .. ':' .. head, '0')
    end
end
if removed > 0 then
    return 1
end
return 0
