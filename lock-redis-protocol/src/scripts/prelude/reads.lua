

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

-- Read holds. Each of an owner's read holds is a key '<prefix>:<n>' (n = 1..count, the
-- count in the owner's field of the lock hash) carrying that hold's lease. Releases do
-- not say which hold they end, so every script keeps the keys' expiries, sorted, at or
-- above the owner's holds' deadlines, sorted: then the lock outlives every live hold,
-- and keys that expired belong to holds that ended.

-- A key's remaining lease for comparison: no expiry counts as forever.
local function lease_left(key)
    local ttl = redis.call('pttl', key)
    if ttl == -1 then
        return math.huge
    end
    return ttl
end

-- Drops the owner's read holds whose keys expired, renumbering the live ones 1..m and
-- setting the owner's count to m (removing the field at 0). Returns m.
local function live_reads(hash, owner, prefix)
    local count = tonumber(redis.call('hget', hash, owner))
    if not count then
        return 0
    end
    local left = {}
    for n = 1, count do
        local ttl = lease_left(prefix .. ':' .. n)
        if ttl > 0 then
            left[#left + 1] = ttl
        end
    end
    if #left == count then
        return count
    end
    for n = 1, count do
        redis.call('del', prefix .. ':' .. n)
    end
    for n, ttl in ipairs(left) do
        if ttl == math.huge then
            redis.call('set', prefix .. ':' .. n, 1)
        else
            redis.call('set', prefix .. ':' .. n, 1, 'px', ttl)
        end
    end
    if #left == 0 then
        redis.call('hdel', hash, owner)
    else
        redis.call('hset', hash, owner, #left)
    end
    return #left
end

-- Ends one of the owner's `count` live read holds. Whichever hold it was, the key with
-- the shortest lease goes (the top key's lease moves into its place), so the remaining
-- keys' expiries still cover the remaining holds. Returns the holds left.
local function drop_read(hash, owner, prefix, count)
    local shortest, shortest_ttl = count, lease_left(prefix .. ':' .. count)
    for n = 1, count - 1 do
        local ttl = lease_left(prefix .. ':' .. n)
        if ttl < shortest_ttl then
            shortest, shortest_ttl = n, ttl
        end
    end
    local top = prefix .. ':' .. count
    if shortest ~= count then
        local ttl = redis.call('pttl', top)
        if ttl > 0 then
            redis.call('set', prefix .. ':' .. shortest, 1, 'px', ttl)
        else
            redis.call('set', prefix .. ':' .. shortest, 1)
        end
    end
    redis.call('del', top)
    if count == 1 then
        redis.call('hdel', hash, owner)
    else
        redis.call('hset', hash, owner, count - 1)
    end
    return count - 1
end
