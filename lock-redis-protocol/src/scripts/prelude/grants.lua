
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
-- An exclusive hold of an owner of one request ('<client>:once-<id>', for an acquisition
-- outside any holder's scope; a writer's field is '<owner>:write') has one grant, <id>,
-- for as long as the owner's field is there: no other request asks as that owner, and
-- a late copy of <id> is answered by its latch. Such a hold keeps no grants hash (a
-- sole grant): the grant is alive while the field is there, it is its own origin, and
-- its latch keeps when the hold began, after its answer: '<answer>+<px>' when the hold
-- began as the latch was set to expire in <px> ms (the grant's own write: the server's
-- clock is read only when somebody asks), or '<answer>@<s>.<us>' (server time) once a
-- later write of the latch would lose that.

-- Whether `field` (an owner's field, or a key that ends with one) is the owner of request
-- `id` alone, and so its hold's grant a sole grant. (A suffix compare: a pattern match
-- costs a script more.)
local function owned_alone(field, id)
    local tail = ':once-' .. id
    local at = #field - #tail
    return string.sub(field, at + 1) == tail or string.sub(field, at - 5) == tail .. ':write'
end

-- Whether the request this script runs for (ARGV[#ARGV - 1]) is a sole grant: the
-- grants hash KEYS[#KEYS - 1] is of the owner of that request alone.
local function sole_grant()
    return owned_alone(KEYS[#KEYS - 1], ARGV[#ARGV - 1])
end

-- When the hold of the sole grant whose latch is `latch` began (server ms), from what the
-- latch keeps after the grant's answer (`kept`, see sole_grant); nil when it keeps none.
local function began_ms(latch, kept)
    local px = string.match(kept, '%+(%d+)$')
    if px then
        return now_ms() - (tonumber(px) - redis.call('pttl', latch))
    end
    local s, us = string.match(kept, '@(%d+)%.(%d+)$')
    return s and tonumber(s) * 1000 + math.floor(tonumber(us) / 1000)
end

-- The request an exclusive hold's field names when its owner is that request's alone
-- (see sole_grant), else nil.
local function sole_request(field)
    return string.match(field, ':once%-(%x+)$') or string.match(field, ':once%-(%x+):write$')
end

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
-- read grant's own expiry (server ms), nil for other grants. Returns the origin, and for
-- a sole grant (which records nothing here) its lease, for granted.
local function record_grant(fresh, lease_ms, expiry)
    local grants, id = KEYS[#KEYS - 1], ARGV[#ARGV - 1]
    if not expiry and sole_grant() then
        return id, lease_ms
    end
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
-- `sole`: a sole grant's lease (see record_grant), whose latch also keeps when the hold
-- began (as the expiry it is set with: no read of the clock, no number written) and
-- lives at least as long as the lease.
local function granted(holds, token, origin, sole)
    local grant = string.format('%d:%d:', holds, token) .. origin
    if sole then
        local px = ARGV[#ARGV]
        if tonumber(sole) > tonumber(px) then
            px = sole
        end
        redis.call('set', KEYS[#KEYS], grant .. '+' .. px, 'px', px)
    else
        redis.call('set', KEYS[#KEYS], grant, 'px', ARGV[#ARGV])
    end
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
-- grant's own expiry; 0 for an exclusive grant, which a sole grant is: then its caller
-- looks for the owner's field).
-- (Two HGETs, not one HMGET: the documented minimal ACL allows HGET already.)
local function grant_alive(now)
    if now == 0 and sole_grant() then
        return true
    end
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
