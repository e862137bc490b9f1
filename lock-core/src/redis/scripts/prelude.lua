-- Shared helpers, prepended to every script.

local function now_ms()
    local time = redis.call('time')
    return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- A fresh fencing token. A missing counter (never used, or lost with the server's data)
-- starts from the server clock in microseconds, so that tokens keep increasing across a
-- restart that lost the counter (as long as the clock does not go back).
local function next_token(key)
    if redis.call('exists', key) == 0 then
        local time = redis.call('time')
        redis.call('set', key, tonumber(time[1]) * 1000000 + tonumber(time[2]))
    end
    return redis.call('incr', key)
end

-- Milliseconds left of the quarantine after the server (re)started, 0 when over or off.
-- The epoch key lives as long as the server's data: a restart that lost the data loses
-- it too, and grants wait one quarantine (at least the longest lease) so that no holder
-- from before the restart can still believe it holds a lock granted again.
local function quarantine_left(epoch_key, quarantine_ms)
    if quarantine_ms == '0' then
        return 0
    end
    local now = now_ms()
    local epoch = redis.call('get', epoch_key)
    if not epoch then
        redis.call('set', epoch_key, now)
        epoch = now
    end
    return math.max(0, tonumber(epoch) + tonumber(quarantine_ms) - now)
end

-- Drops fair-lock queue heads whose deadline passed: they stopped asking (died or gave
-- up). Returns the first live waiter.
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


-- Whether the lock key exists (false when missing). A key of another type ends the
-- script with a WRONGTYPE error naming the type: a lock must never overwrite user data.
local function lock_exists(key)
    local kind = redis.call('type', key)['ok']
    if kind == 'none' then
        return false
    end
    if kind ~= 'hash' then
        error({err = 'WRONGTYPE the lock key holds a ' .. kind})
    end
    return true
end

-- Takes one hold of `field` back and returns how many are left; while any are, the
-- lease is extended to `lease_ms` (never shortened).
local function drop_hold(key, field, lease_ms)
    local holds = redis.call('hincrby', key, field, -1)
    if holds > 0 and redis.call('pttl', key) < tonumber(lease_ms) then
        redis.call('pexpire', key, lease_ms)
    end
    return holds
end
