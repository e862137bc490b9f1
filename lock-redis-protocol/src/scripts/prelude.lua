-- Shared helpers: each script carries those it calls (see script/prelude.rs).

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
-- The epoch key holds '<replication id>:<ms>': the dataset history this server began
-- granting in, and when; once the quarantine is over, the replication id alone. The
-- replication id (`master_replid`) changes whenever the data may have gone back in time:
-- every start of the server process (a snapshot, or an AOF written every second, comes
-- back without the latest grants), every promotion of a replica (a failover, or a
-- failback after a full resync from another master). Grants then wait one quarantine
-- (at least the longest lease), so that no holder from before may still believe it
-- holds a lock granted again. A fresh server (no epoch) waits it too. The first client
-- to find the quarantine over ends it for every client of the server: give them all the
-- same setting. Outside a quarantine a check costs `INFO replication` and one GET (about
-- 1.6 us of server time); `INFO server`, for the run id, costs more and misses the
-- rollbacks that need no restart.
local function quarantine_left(epoch_key, quarantine_ms)
    if quarantine_ms == '0' then
        return 0
    end
    -- A plain find and a fixed-length cut: a pattern match costs the script 0.6 us more.
    local info = redis.call('info', 'replication')
    local at = string.find(info, 'master_replid:', 1, true)
    local history = at and string.sub(info, at + 14, at + 53) or ''
    local epoch = redis.call('get', epoch_key)
    if epoch == history then
        return 0
    end
    local started
    if epoch then
        local sep = string.find(epoch, ':', 1, true)
        if sep and string.sub(epoch, 1, sep - 1) == history then
            started = tonumber(string.sub(epoch, sep + 1))
        end
    end
    local now = now_ms()
    if not started then
        redis.call('set', epoch_key, history .. ':' .. now)
        started = now
    end
    local left = started + tonumber(quarantine_ms) - now
    if left <= 0 then
        redis.call('set', epoch_key, history)
        return 0
    end
    return left
end

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

-- Grants. Each grant is known by the id of the acquire request that got it. The grants
-- of one owner's hold live in that hold's grants hash (layout::grants_key, beside the
-- lock where Redisson peers ignore it, with the lock's expiry): field 'o' names the grant
-- that began the hold, and each live grant is a field whose value is that origin (for a
-- read grant, '<origin>:<expiry ms>': read holds each end on their own). A grant is alive
-- while its field is there, its origin is the hold's, and (reads) its expiry has not
-- passed: a hold that ended and began again has a new origin, so no grant of the old one
-- is alive in it. A release or an undo ends exactly the grant it names, only while it is
-- alive.
-- Every lock script that grants or releases takes the owner's grants hash and the grant's
-- latch as its last two KEYS, and the grant's id and the latch lifetime (ms) as its last
-- two ARGV. The latch remembers the grant as '<holds>:<token>:<origin>' for retries of
-- the acquire request, then the release's answer as 'r<answer>' for retries of the
-- release (and so that a late copy of the acquire request grants nothing). Its lifetime
-- is twice the retry window, the longest a copy of a request is assumed to take.

-- The grant this acquire request got before, or {5, 0} (ended) when that grant already
-- ended or its acquisition gave up: an acquisition is granted at most once, and never
-- after it ended. False when the request is new.
local function grant_replayed()
    local before = redis.call('get', KEYS[#KEYS])
    if before and string.sub(before, 1, 1) == 'r' then
        return {5, 0}
    end
    return before
end

-- Records the grant in the owner's grants hash, with `lease_ms` on it. A `fresh` grant
-- begins the hold (it is its origin); any other joins the hold's origin. `expiry` is a
-- read grant's own expiry (server ms), nil for other grants. Returns the origin.
local function record_grant(fresh, lease_ms, expiry)
    local grants, id = KEYS[#KEYS - 1], ARGV[#ARGV - 1]
    local origin = id
    if not fresh then
        origin = redis.call('hget', grants, 'o')
    end
    if not origin then
        -- A hold begun without a record (before grants were recorded): this grant
        -- begins its record; earlier grants of the hold cannot be named.
        origin = id
        fresh = true
    end
    local value = origin
    if expiry then
        value = origin .. ':' .. expiry
    end
    if fresh then
        -- 's': when the hold began (server ms), for introspection.
        redis.call('hset', grants, 'o', origin, id, value, 's', now_ms())
    else
        redis.call('hset', grants, id, value)
    end
    if fresh or lease_left(grants) < tonumber(lease_ms) then
        redis.call('pexpire', grants, lease_ms)
    end
    return origin
end

-- Remembers a grant and answers with it: '<holds>:<token>:<origin>', the same string a
-- request sent again gets back (one bulk string is cheaper for the server to write and
-- for a client to read than an array). '%d', not concatenation: Lua writes numbers with
-- 14 significant digits, and a fencing token has 16 or more.
local function granted(holds, token, origin)
    local grant = string.format('%d:%d:', holds, token) .. origin
    redis.call('set', KEYS[#KEYS], grant, 'px', ARGV[#ARGV])
    return grant
end

-- Remembers and returns a release's answer.
local function released(answer)
    redis.call('set', KEYS[#KEYS], 'r' .. answer, 'px', ARGV[#ARGV])
    return answer
end

-- The answer of this grant's release sent before; nil when the release is to run.
local function release_replayed()
    local before = redis.call('get', KEYS[#KEYS])
    if before and string.sub(before, 1, 1) == 'r' then
        return tonumber(string.sub(before, 2))
    end
    return nil
end

-- Whether the named grant is alive in its grants hash (`now` in server ms, for a read
-- grant's own expiry).
-- (Two HGETs, not one HMGET: the documented minimal ACL allows HGET already.)
local function grant_alive(now)
    local grant = redis.call('hget', KEYS[#KEYS - 1], ARGV[#ARGV - 1])
    if not grant then
        return false
    end
    local origin, expiry = string.match(grant, '^(%x+):?(%d*)$')
    if origin ~= redis.call('hget', KEYS[#KEYS - 1], 'o') then
        return false
    end
    return expiry == '' or tonumber(expiry) > now
end

-- Ends the named grant of the exclusive hold `field` on lock `key` if it is alive, and
-- returns the holds left; nil when it is not alive. While holds are left, the lease is
-- extended to `lease_ms` (never shortened), on the grants hash too; the hold's last grant
-- is left to the caller, which deletes the field and the grants hash.
local function end_exclusive_grant(key, field, lease_ms)
    local grants = KEYS[#KEYS - 1]
    if not grant_alive(0) then
        return nil
    end
    local held = redis.call('hget', key, field)
    if not held then
        return nil
    end
    if held == '1' then
        return 0
    end
    redis.call('hdel', grants, ARGV[#ARGV - 1])
    local holds = redis.call('hincrby', key, field, -1)
    if redis.call('pttl', key) < tonumber(lease_ms) then
        redis.call('pexpire', key, lease_ms)
        redis.call('pexpire', grants, lease_ms)
    end
    return holds
end

-- Ends the named grant of owner ARGV[2] on the exclusive lock KEYS[1], re-arming lease
-- ARGV[1] on the holds left. Returns the script's answer when it is settled (a replayed
-- request, not alive, holds left); nil when the last hold went and the lock was deleted,
-- so that the caller wakes its waiters and answers released(0).
local function release_exclusive()
    local before = release_replayed()
    if before then
        return before
    end
    local holds = end_exclusive_grant(KEYS[1], ARGV[2], ARGV[1])
    if not holds then
        return released(-1)
    end
    if holds > 0 then
        return released(holds)
    end
    redis.call('del', KEYS[1], KEYS[#KEYS - 1])
    return nil
end

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

-- Whether the free lock `lock` may be handed over to the waiting acquisition `request`:
-- not while the restart quarantine lasts, nor to an acquisition answered already (a
-- grant, or one that ended: it is not waiting, whatever its entry says).
local function may_hand_over(lock, request, epoch, quarantine_ms)
    return quarantine_left(epoch, quarantine_ms) == 0
        and redis.call('exists', latch_of(lock, request)) == 0
end

-- Makes the waiting acquisition `request` the holder of the free lock `lock` under the
-- field `field` (its owner's; '<owner>:write' for a writer, with `mode` 'write', else nil),
-- as its own acquire script would have (the field, its grants hash begun by it, a fresh
-- token when `fencing` is '1'), with a lease of the waiter's place (`place_ms`) or its
-- lease (`lease_ms`), whichever is shorter: a holder that dies before its take-up (or
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
    -- Fields an earlier hold of the owner left are not alive under this origin.
    redis.call('hset', grants, 'o', request, request, request, 's', now_ms())
    redis.call('pexpire', grants, hold_ms)
    local token = 0
    if fencing == '1' then
        token = next_token(token_key)
    end
    redis.call('set', latch_of(lock, request), string.format('h1:%d:', token) .. request,
        'px', hold_ms + tonumber(latch_ms))
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
    if lease_left(key) < tonumber(lease_ms) then
        redis.call('pexpire', key, lease_ms)
        redis.call('pexpire', KEYS[#KEYS - 1], lease_ms)
    end
    local grant = redis.call('get', latch)
    if string.sub(grant, 1, 1) == 'h' then
        grant = string.sub(grant, 2)
    end
    redis.call('set', latch, grant, 'px', ARGV[#ARGV])
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
    local origin = string.match(redis.call('hget', grants, request) or '', '^(%x+)')
    if not (origin and origin == redis.call('hget', grants, 'o')
            and redis.call('hexists', lock, owner) == 1) then
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
