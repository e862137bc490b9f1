
-- Whether the free lock `lock` may be handed over to the waiting acquisition `request`:
-- not while the restart quarantine lasts, nor to an acquisition answered already (a
-- grant, or one that ended: it is not waiting, whatever its entry says).
local function may_hand_over(lock, request, epoch, quarantine_ms)
    return quarantine_left(epoch, quarantine_ms) == 0
        and redis.call('exists', latch_of(lock, request)) == 0
end

-- Makes the waiting acquisition `request` the holder of the free lock `lock` under the
-- field `field` (its owner's; '<owner>:write' for a writer, with `mode` 'write', else nil),
-- as its own acquire script would have (the field, its grants hash begun by it unless it
-- is a sole grant, a fresh token when `fencing` is '1'), with a lease of the waiter's
-- place (`place_ms`) or its lease (`lease_ms`), whichever is shorter: a holder that dies before its take-up (or
-- after it) is replaced within its own lease. The latch says 'h<holds>:<token>:<origin>'
-- (handed, not taken up; see find_grant) and outlives the hold by a latch lifetime
-- (`latch_ms`, two retry windows), so that a take-up that comes after the hold lapsed
-- finds it ended. Returns the token (0 without fencing).
local function grant_handed(lock, field, request, fencing, place_ms, lease_ms, latch_ms,
                            token_key, mode)
    local hold_ms = math.min(tonumber(place_ms), tonumber(lease_ms))
    local grants = grants_of(lock, field)
    if mode then
        redis.call('hset', lock, 'mode', mode, field, 1)
    else
        redis.call('hset', lock, field, 1)
    end
    redis.call('pexpire', lock, hold_ms)
    local latch_px = string.format('%d', hold_ms + tonumber(latch_ms))
    local since = ''
    if owned_alone(field, request) then
        -- When the hold began, as the expiry the latch is set with (see sole_grant).
        since = '+' .. latch_px
    else
        -- Fields an earlier hold of the owner left are not alive under this origin.
        redis.call('hset', grants, 'o', request, request, request, 's', now_ms())
        redis.call('pexpire', grants, hold_ms)
    end
    local token = 0
    if fencing == '1' then
        token = next_token(token_key)
    end
    redis.call('set', latch_of(lock, request),
        string.format('h1:%d:', token) .. request .. since, 'px', latch_px)
    return token
end

-- Hand-over. A waiting client's entry in the mutex's requests hash (`m.requests`; `m`:
-- the lock's keys and settings, see wake_mutex_waiters) names its acquisition that
-- waits, as its latest attempt to run left it:
-- '<request id>:<fencing 0|1>:<place ms>:<latch ms>:<attempt>:<lease ms>:<field>', where
-- the field is the owner's ('<owner>:write' for a writer of a read-write lock, whose
-- writers wait in the same keys).
-- A release that wakes that client alone hands the free lock to that acquisition: a
-- hold of its owner under its request id, as its own acquire script would have made it,
-- whose lease lasts only the waiter's place (`place ms`) or its lease, if shorter, and
-- whose latch says 'h<holds>:<token>:<origin>' (handed, not taken up). The waiter's next
-- attempt, under the same id, takes it up (find_grant) with its full lease; a
-- waiter that gave up gives it back at once (mutex_cancel); one that vanished or stalled
-- loses it when that lease lapses, and the waiters behind it, who ask again within a
-- third of their place, find it free. Nothing is handed during the restart quarantine, nor to a client whose
-- entry is missing or malformed (an older version of this library): those are woken
-- to ask. Returns what the waiter's client is told, '<request id>:<token>:<attempt>'
-- (the attempt its entry came from: the waiter's lease counts from when it sent that
-- one at the latest), or nil when nothing was handed over.
local function hand_over(target, m)
    local entry = redis.call('hget', m.requests, target)
    if not entry then
        return nil
    end
    redis.call('hdel', m.requests, target)
    local request, fencing, place_ms, latch_ms, attempt, lease_ms, field =
        string.match(entry, '^(%x+):([01]):(%d+):(%d+):(%d+):(%d+):(.+)$')
    if not (field and may_hand_over(m.lock, request, m.epoch, m.quarantine_ms)) then
        return nil
    end
    local token = grant_handed(m.lock, field, request, fencing, place_ms, lease_ms, latch_ms,
        m.token, m.mode)
    return request .. string.format(':%d:', token) .. attempt
end

-- Finds the grant this acquire request's acquisition got before (its latch,
-- KEYS[#KEYS], says 'h...' for a hold handed over to it, see hand_over, or the plain
-- grant): a retry after a lost reply, the take-up of a handed hold, or a waiter's
-- attempt after a late copy of an earlier one was granted. With the owner's `field` of
-- lock `key` still there under that grant, the hold gets the request's lease (extended
-- only: its client counts the lease from this request) and the latch the grant as a
-- plain one. Returns the grant; {5, 0} (ended) when the grant is gone (released, lapsed,
-- or force-released): the latch then says so, and the acquisition's id grants nothing
-- more (a take-up only takes up; review 3, R1).
local function find_grant(key, field, lease_ms)
    local latch = KEYS[#KEYS]
    if not (grant_alive(0) and redis.call('hexists', key, field) == 1) then
        redis.call('set', latch, 'r-1', 'px', ARGV[#ARGV])
        return {5, 0}
    end
    local sole = sole_grant()
    if lease_left(key) < tonumber(lease_ms) then
        redis.call('pexpire', key, lease_ms)
        if not sole then
            redis.call('pexpire', KEYS[#KEYS - 1], lease_ms)
        end
    end
    local kept = redis.call('get', latch)
    if string.sub(kept, 1, 1) == 'h' then
        kept = string.sub(kept, 2)
    end
    if not sole then
        redis.call('set', latch, kept, 'px', ARGV[#ARGV])
        return kept
    end
    -- A sole grant's latch keeps when its hold began, for as long as the hold's lease:
    -- as server time, since this write moves the latch's expiry.
    local grant = string.match(kept, '^[^@+]*')
    local value = grant
    local began = began_ms(latch, kept)
    if began then
        value = grant .. string.format('@%d.%d', math.floor(began / 1000), began % 1000 * 1000)
    end
    redis.call('set', latch, value, 'px', math.max(tonumber(ARGV[#ARGV]), tonumber(lease_ms)))
    return grant
end

-- Wakes a mutex's waiters once it is free (`m`: its keys and settings, see the mutex
-- release script): one client alone where it can (see next_waiting_client), on its own
-- channel where it listens there (one message instead of one per listener of the
-- lock's channel; its payload is the lock's channel, after 'handed:<what hand_over
-- returned>:' when the lock was handed over), else with its wake id on the lock's
-- channel (followed by ':<what hand_over returned>' when handed over); otherwise every
-- listener with '0', as Redisson does. `m.numsub` is the
-- PUBSUB subcommand that counts the channel's listeners, or '' where this server cannot
-- see them all (then every release tells everybody). A server that refuses one of the
-- commands (an ACL written before they were needed) costs the targeting, never the
-- release.
-- A client woken alone is handed the lock (see hand_over) unless a starving waiter
-- holds the reservation. Otherwise the lock is offered for `m.offer_ms` to the
-- registered client that has waited longest, in the reservation key (unless a starving
-- waiter holds it): our other waiters, woken by the same '0' or arriving anew, cannot
-- take it from under that client, which keeps our clients in the order they
-- registered. (Redisson's own script does not look at the reservation; its waiters
-- compete as they always did, and since any of them may listen whenever a release
-- tells everybody, nothing is handed over then.) When more listen than are registered,
-- a client of another library surely waits, and the lock is offered to the clients of
-- other libraries instead (the reservation names `others()`): our clients keep back
-- until one of them takes it (see the mutex acquire script), the offer lapses, or a
-- release finds none of them listening any more. A
-- Redisson-protocol waiter thus gets the turn after each of our releases, where it
-- lost every race to our faster clients and got a few percent of the turns (issue 48).
-- A read-write lock's writers wait the same way (`m.mode` 'write'; no reservation, and
-- `m.everybody` '1' tells every reader and writer): only when every listener of the
-- lock's channel is a registered writer's client is one handed the lock.
local function wake_mutex_waiters(m)
    local target, alone, own = nil, false, false
    local counted, found, found_alone, found_own, foreign =
        pcall(next_waiting_client, m.waiting, m.channel, m.numsub)
    if counted then
        target, alone, own = found, found_alone, found_own
    end
    if counted and foreign and m.reservation then
        redis.call('set', m.reservation, now_ms() .. ':' .. others(), 'px', m.offer_ms, 'nx')
    end
    -- A target means none of the other libraries' clients listens any more: an offer to
    -- them ends (the protocol's rules), and the lock goes to our client.
    local reserved = target and m.reservation and redis.call('get', m.reservation)
    if reserved and reserved_for(reserved) == others() then
        redis.call('del', m.reservation)
        reserved = false
    end
    local handed = nil
    if target and alone and not reserved then
        handed = hand_over(target, m)
    end
    if target and not handed then
        redis.call('hdel', m.requests, target)
    end
    if target and not handed and m.reservation then
        if not redis.call('set', m.reservation, now_ms() .. ':' .. target, 'px', m.offer_ms, 'nx')
            and redis.call('pttl', m.reservation) < tonumber(m.offer_ms) then
            -- A starving waiter's reservation stands, and must last until that waiter,
            -- woken by this release, could come: else a newcomer takes the lock as it
            -- lapses.
            redis.call('pexpire', m.reservation, m.offer_ms)
        end
    end
    if not alone then
        redis.call(m.publish, m.channel, m.everybody or '0')
        return
    end
    local told = m.channel
    if handed then
        told = 'handed:' .. handed .. ':' .. m.channel
    end
    if not (own and pcall(redis.call, 'publish', own_channel(target), told)) then
        if handed then
            redis.call(m.publish, m.channel, target .. ':' .. handed)
        else
            redis.call(m.publish, m.channel, target)
        end
    end
end

-- A waiting acquisition `request` of `owner` (its field: '<owner>:write' for a writer)
-- gives up, so its client holds nothing of it: a grant it never learnt of (a hold handed
-- over to it and not taken up, see hand_over, or a grant a late copy of one of its
-- attempts got) ends, its own grant alone (the owner's other acquisitions may have
-- joined the hold since, and keep theirs), and its latch answers a late copy of one of
-- its attempts with nothing for `latch_ms` (a cancelled acquisition's late attempt must
-- not take the lock for nobody; review 3, R2). Returns whether a grant ended.
local function end_acquisition(lock, owner, request, latch_ms)
    local latch = latch_of(lock, request)
    local before = redis.call('get', latch)
    redis.call('set', latch, 'r-1', 'px', latch_ms)
    if not before or string.sub(before, 1, 1) == 'r' then
        return false
    end
    local grants = grants_of(lock, owner)
    local alive = owned_alone(owner, request)
    if not alive then
        local origin = string.match(redis.call('hget', grants, request) or '', '^(%x+)')
        alive = origin and origin == redis.call('hget', grants, 'o')
    end
    if not (alive and redis.call('hexists', lock, owner) == 1) then
        return false
    end
    local held = tonumber(redis.call('hget', lock, owner) or '0')
    if held > 1 then
        redis.call('hincrby', lock, owner, -1)
        redis.call('hdel', grants, request)
    else
        redis.call('del', grants)
        redis.call('hdel', lock, owner)
        -- A writer's read holds (taken under the handed write hold) keep the lock,
        -- for reading.
        local left = redis.call('hlen', lock)
        if left == 0 or (left == 1 and redis.call('hexists', lock, 'mode') == 1) then
            redis.call('del', lock)
        elseif redis.call('hget', lock, 'mode') == 'write' then
            redis.call('hset', lock, 'mode', 'read')
        end
    end
    return true
end

-- Serves the first live waiter of a fair lock that is free (`f`: its keys and settings,
-- see the fair release script). A waiter of ours that keeps its place is handed the lock
-- (as hand_over does for a mutex, from its entry in the liveness hash; see alive_until)
-- and leaves the queue, as its own acquire script would have made it leave; it is told
-- 'handed:<request id>:<token>:<attempt>' on its channel. Any other first waiter (a
-- Redisson client, an older version of ours, or anybody during the restart quarantine)
-- is told '0' there, and takes the lock with its next attempt.
local function hand_fair_lock(f)
    local head = prune(f.queue, f.deadlines, f.alive, now_ms())
    if not head then
        return
    end
    local channel = f.prefix .. ':' .. head
    local request, fencing, place_ms, attempt, latch_ms, lease_ms = string.match(
        redis.call('hget', f.alive, head) or '', '^%d+:(%x+):([01]):(%d+):(%d+):(%d+):(%d+)$')
    if not (request and may_hand_over(f.lock, request, f.epoch, f.quarantine_ms)) then
        redis.call(f.publish, channel, '0')
        return
    end
    redis.call('lpop', f.queue)
    -- As Redisson does: everyone behind moves one slot closer.
    advance_scores(f.queue, f.deadlines, 0, f.slot)
    redis.call('zrem', f.deadlines, head)
    redis.call('hdel', f.alive, head)
    local token = grant_handed(f.lock, head, request, fencing, place_ms, lease_ms, latch_ms,
        f.token, nil)
    redis.call(f.publish, channel, 'handed:' .. request .. string.format(':%d:', token) .. attempt)
end
