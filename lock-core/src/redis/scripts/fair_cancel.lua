-- A waiter of the fair lock gives up: it leaves the queue, and if it was first while the
-- lock is free, the next waiter is woken.
-- KEYS[1] lock hash; KEYS[2] waiter queue; KEYS[3] waiter deadlines.
-- ARGV[1] owner; ARGV[2] channel prefix; ARGV[3] publish command.
-- Reply: 1 if the owner was queued, else 0.
local function now_ms()
    local time = redis.call('time')
    return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- Drops queue heads whose deadline passed: they stopped asking (died or gave up).
local function prune(queue, deadlines, now)
    while true do
        local head = redis.call('lindex', queue, 0)
        if not head then
            return nil
        end
        local deadline = tonumber(redis.call('zscore', deadlines, head))
        if deadline and deadline > now then
            return head
        end
        redis.call('lpop', queue)
        redis.call('zrem', deadlines, head)
    end
end

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
