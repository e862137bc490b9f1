
-- A permit id as the expirable semaphore stores it: its 16 raw bytes (sent as 32 hex
-- digits, the form Java shows them in).
local function permit_bytes(hex)
    return (string.gsub(hex, '%x%x', function(pair)
        return string.char(tonumber(pair, 16))
    end))
end

-- Reclaims an expirable semaphore's issued permits whose expiry passed (scores are
-- absolute epoch ms, ours from the server clock, Java's from its own): they are
-- available again, and listeners are told the new count when it is positive. GET first:
-- a semaphore key of another type ends the script with WRONGTYPE before any write.
-- Returns the server time in ms.
local function reclaim_permits(semaphore, timeouts, channel, publish)
    redis.call('get', semaphore)
    local now = now_ms()
    local expired = redis.call('zremrangebyscore', timeouts, '-inf', now)
    if expired > 0 then
        local count = redis.call('incrby', semaphore, expired)
        if count > 0 then
            redis.call(publish, channel, count)
        end
    end
    return now
end

-- Whether `wanted` of a semaphore's `count` available permits may be taken, under the
-- starving waiter's reservation in `reserved` ('<waiter>:<permits>:<since ms>', with a
-- TTL): another waiter's reservation holds its number back, unless this caller ('' for
-- none) has waited longer (since `now - waited`) and takes it over; a starving caller
-- that finds too few reserves them for `kept_for` ms; the reserving waiter's grant ends
-- its reservation. Nobody reserves more than the semaphore's peak (the most permits
-- available at once since the count last went down, kept in `peak`), and a reservation
-- of more than the peak holds nothing back: the permits it waits for may not exist.
-- Java clients know nothing of either. Reply: 1 taken, 0 not now, 2 beyond the peak.
local function may_take(reserved, peak_key, count, wanted, waiter, waited, kept_for)
    local now = now_ms()
    local since = now - tonumber(waited)
    local peak = tonumber(redis.call('get', peak_key) or false)
    if peak == nil or count > peak then
        peak = count
        redis.call('set', peak_key, count)
    end
    local holder, held, held_since
    local reservation = redis.call('get', reserved)
    if reservation then
        holder, held, held_since = string.match(reservation, '^(%x+):(%d+):(%d+)$')
        if held and tonumber(held) > peak then
            holder = nil
        end
    end
    local mine = (holder == nil) or (waiter ~= '' and (holder == waiter or since < tonumber(held_since)))
    if not mine then
        if count - wanted >= tonumber(held) then
            return 1
        end
        return 0
    end
    if count >= wanted then
        if holder then
            redis.call('del', reserved)
        end
        return 1
    end
    if wanted > peak then
        return 2
    end
    if waiter ~= '' then
        redis.call('set', reserved, waiter .. ':' .. wanted .. ':' .. since, 'px', kept_for)
    end
    return 0
end
