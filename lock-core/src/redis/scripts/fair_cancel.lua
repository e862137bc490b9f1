-- A waiter of the fair lock gives up: it leaves the queue, and if it was first while the
-- lock is free, the next waiter is woken.
-- KEYS[1] lock hash; KEYS[2] waiter queue; KEYS[3] waiter deadlines.
-- ARGV[1] owner; ARGV[2] channel prefix; ARGV[3] publish command.
-- Reply: 1 if the owner was queued, else 0.

local first = redis.call('lindex', KEYS[2], 0)
local removed = redis.call('lrem', KEYS[2], 0, ARGV[1])
redis.call('zrem', KEYS[3], ARGV[1])
if first == ARGV[1] and redis.call('exists', KEYS[1]) == 0 then
    local head = prune(KEYS[2], KEYS[3], now_ms())
    if head then
        redis.call(ARGV[3], ARGV[2] .. ':' .. head, '0')
    end
end
if removed > 0 then
    return 1
end
return 0
