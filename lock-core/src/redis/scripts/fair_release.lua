-- Releases one hold of the fair lock; the last one wakes the first waiter only.
-- KEYS[1] lock hash; KEYS[2] waiter queue; KEYS[3] waiter deadlines.
-- ARGV[1] lease (ms); ARGV[2] owner; ARGV[3] channel prefix (a waiter listens on
-- '<prefix>:<owner>'); ARGV[4] publish command.
-- Reply: -1 not held (nothing changed); 0 released; n > 0 holds left.
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

if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return -1
end
local holds = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if holds > 0 then
    if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
        redis.call('pexpire', KEYS[1], ARGV[1])
    end
    return holds
end
redis.call('del', KEYS[1])
local head = prune(KEYS[2], KEYS[3], now_ms())
if head then
    redis.call(ARGV[4], ARGV[3] .. ':' .. head, '0')
end
return 0
