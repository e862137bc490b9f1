
-- When a fair-lock waiter of ours stops keeping its place, from its entry in the
-- liveness hash, '<deadline ms>' followed, for a waiter that may be handed the lock, by
-- ':<request id>:<fencing 0|1>:<place ms>:<attempt>:<latch ms>:<lease ms>' (see
-- hand_fair_lock);
-- nil for no entry (false) or a malformed one.
local function alive_until(entry)
    if not entry then
        return nil
    end
    return tonumber(string.match(entry, '^%d+'))
end

-- The acquisition a fair-lock waiter's liveness entry names (see alive_until); nil for
-- no entry, or one that names none (an older version of this library).
local function placed_by(entry)
    if not entry then
        return nil
    end
    return string.match(entry, '^%d+:(%x+):')
end

-- Drops fair-lock queue heads that stopped asking (died or gave up) and returns the first
-- live waiter. Our waiters are alive until the deadline in the liveness hash, which each
-- of their attempts moves on; a Redisson waiter (no entry there) until its zset score.
local function prune(queue, deadlines, alive, now)
    while true do
        local head = redis.call('lindex', queue, 0)
        if not head then
            return nil
        end
        local deadline = alive_until(redis.call('hget', alive, head))
            or tonumber(redis.call('zscore', deadlines, head))
        if deadline and deadline > now then
            return head
        end
        redis.call('lpop', queue)
        redis.call('zrem', deadlines, head)
        redis.call('hdel', alive, head)
    end
end

-- Moves the Redisson scores of the waiters after position `from` (1-based; 0 for all)
-- one wait slot closer, as Redisson does when a waiter ahead leaves the queue.
local function advance_scores(queue, deadlines, from, slot)
    local waiting = redis.call('lrange', queue, from, -1)
    for _, owner in ipairs(waiting) do
        if redis.call('zscore', deadlines, owner) then
            redis.call('zincrby', deadlines, -slot, owner)
        end
    end
end

-- How long the fair queue's keys live. While a Redisson waiter (no liveness entry) is
-- queued they never expire, as under Redisson: its entry lives by its score alone. With
-- only our waiters they go twice the waiter timeout after the last of them asked.
local function keep_queue(queue, deadlines, alive, timeout)
    local waiting = redis.call('llen', queue)
    if waiting == 0 then
        redis.call('del', queue, deadlines, alive)
        return
    end
    -- Every one of our queued waiters has a liveness entry, and our scripts remove it
    -- with the waiter: fewer entries than waiters means a Redisson waiter is queued.
    -- (O(1), not a pass over the queue on every attempt. Only a Redisson client pruning
    -- one of ours, whose score stays a slot ahead of the clock, could leave an entry
    -- behind; the cost would be fairness, never exclusion.)
    if redis.call('hlen', alive) < waiting then
        redis.call('persist', queue)
        redis.call('persist', deadlines)
        redis.call('persist', alive)
        return
    end
    redis.call('pexpire', queue, timeout * 2)
    redis.call('pexpire', deadlines, timeout * 2)
    redis.call('pexpire', alive, timeout * 2)
end

-- Removes `owner` from the fair queue, advancing the scores of those behind it.
local function leave_queue(queue, deadlines, alive, owner, slot)
    local waiting = redis.call('lrange', queue, 0, -1)
    for i, queued in ipairs(waiting) do
        if queued == owner then
            advance_scores(queue, deadlines, i, slot)
            break
        end
    end
    redis.call('hdel', alive, owner)
    redis.call('zrem', deadlines, owner)
    return redis.call('lrem', queue, 0, owner)
end
