
-- Publishes a latch's `message` on `channel`, and on `also` unless it is empty (Java's
-- channel for a name with its own hash tag, which differs from ours).
local function publish_latch(publish, channel, also, message)
    redis.call(publish, channel, message)
    if also ~= '' then
        redis.call(publish, also, message)
    end
end

-- Refuses, as WRONGTYPE, an operation of one kind ('semaphore' or 'latch') on the other
-- kind's count: both keep a plain count under the name (Redisson's layout), told apart
-- by the marker our scripts keep beside it. A count without a marker (a Redisson peer's)
-- is taken for what the caller says; a marker whose count is gone is stale.
local function check_kind(count, marker, kind)
    local marked = redis.call('get', marker)
    if marked and marked ~= kind and redis.call('exists', count) == 1 then
        error({err = 'WRONGTYPE ' .. count .. ' holds a ' .. marked .. ', not a ' .. kind})
    end
end
