
-- The channel on which the waiting client `wake_id` may listen to be woken alone
-- (layout::own_channel; classic pub/sub outside a cluster only).
local function own_channel(wake_id)
    return 'redisson_lock__channel:' .. wake_id
end

-- Whether the client `wake_id` listens on its own channel; false where the server refuses
-- the count.
local function listens_on_own_channel(wake_id)
    local counted, counts = pcall(redis.call, 'pubsub', 'numsub', own_channel(wake_id))
    return counted and counts[2] > 0
end

-- The owner a mutex's reservation names while a release offers the lock to the clients
-- of other libraries (see wake_mutex_waiters): no owner or wake id of ours is this.
local function others()
    return 'others'
end

-- Who the reservation value `value` ('<ms>:<owner or wake id>') names; nil when malformed.
local function reserved_for(value)
    local sep = string.find(value, ':', 1, true)
    return sep and string.sub(value, sep + 1)
end

-- This library's clients with a waiter on a mutex register in the zset `waiting`
-- (member: the client's wake id; score: when it registered, on the server's clock), and
-- each listens on the lock's channel once. Returns the wake id of the client that
-- registered first (taken out of the zset: it is served, or registers again), or nil
-- when none is; whether a release may tell that client alone; and whether it listens on
-- its own channel (only looked at with `numsub` 'numsub').
-- Alone when every listener of the lock's channel is a registered client (else a
-- Redisson waiter may listen, and everybody must hear it), or when fewer listen than are
-- registered and the first registered client listens on its own channel. Our clients
-- register with the attempt that finds the lock busy and subscribe after its answer, so
-- under contention a release often finds a client between the two: it will ask again
-- once subscribed, and must not make every other client ask too. (The own channel tells
-- a live client from one that vanished without a word: a vanished client stays
-- registered until it comes first; then everybody is told, one release offers it the
-- lock in vain, and drops it.)
-- The fourth answer says whether more listen than are registered: then a client of
-- another library (Redisson's protocol: it waits on the lock's channel and never
-- registers) surely waits too, and no client of ours is picked (see
-- wake_mutex_waiters).
local function next_waiting_client(waiting, channel, numsub)
    local registered = redis.call('zcard', waiting)
    if registered == 0 then
        return nil, false, false, false
    end
    local listening = numsub ~= '' and redis.call('pubsub', numsub, channel)[2]
    if listening and listening > registered then
        return nil, false, false, true
    end
    local target = redis.call('zpopmin', waiting)[1]
    local own = numsub == 'numsub' and listens_on_own_channel(target)
    local alone = listening == registered or (listening and listening < registered and own)
    return target, alone, own, false
end

-- Registers the waiting client `wake_id` ('' for a caller that does not wait) behind the
-- clients registered before; a client already registered keeps its place. Its entry in
-- the hash `requests` says which of its acquisitions waits now (a client's waiters for
-- one lock ask one at a time; see hand_over): `request` names it. Both keys live
-- `lifetime_ms` past the latest registration.
local function register_waiting(waiting, requests, wake_id, lifetime_ms, request)
    if wake_id ~= '' then
        redis.call('zadd', waiting, 'NX', string.format('%d', now_ms()), wake_id)
        redis.call('hset', requests, wake_id, request)
        redis.call('pexpire', waiting, lifetime_ms)
        redis.call('pexpire', requests, lifetime_ms)
    end
end

-- How long a registered waiter that found the lock busy (its PTTL `ttl`, negative when
-- free) waits before asking again: at most a third of its place `place_ms`, so that a
-- lock handed to a waiter that stalled is free again for it after one place.
local function asks_again_within(ttl, place_ms)
    local within = math.max(1, math.floor(tonumber(place_ms) / 3))
    if ttl < 0 or ttl > within then
        return within
    end
    return ttl
end

-- Whether the waiting client `wake_id` is the first registered (see
-- next_waiting_client); true for a caller that does not register ('') and where the
-- server refuses ZRANGE (an ACL written before it was needed: only the order is lost).
local function registered_first(waiting, wake_id)
    if wake_id == '' then
        return true
    end
    local looked, first = pcall(redis.call, 'zrange', waiting, 0, 0)
    return not looked or first[1] == nil or first[1] == wake_id
end

-- The name's hash tag as every key of the lock embeds it (layout::tagged): the name
-- itself when it holds a '{', else the name in braces.
local function tagged(name)
    if string.find(name, '{', 1, true) then
        return name
    end
    return '{' .. name .. '}'
end

-- The latch of grant `request` of lock `name` (layout::grant_latch_key).
local function latch_of(name, request)
    return 'redisson_lock_latch:' .. tagged(name) .. ':' .. request
end

-- The grants hash of `owner`'s hold of lock `name` (layout::grants_key).
local function grants_of(name, owner)
    return 'redisson_lock_grants:' .. tagged(name) .. ':' .. owner
end
