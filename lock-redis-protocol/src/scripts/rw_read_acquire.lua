-- Takes a read hold of a read-write lock.
-- KEYS[1] lock: lock hash; KEYS[2] token: fencing counter; KEYS[3] epoch: restart epoch;
-- KEYS[4] grants: the reader's grants hash; KEYS[5] latch: grant latch. ARGV[1] lease_ms:
-- lease (ms); ARGV[2] owner: owner; ARGV[3] hold_prefix: the owner's hold-key prefix
-- ('{name}:<owner>:rwlock_timeout'; hold n lives in '<prefix>:<n>' with its own lease);
-- ARGV[4] fencing: '1' to return a fencing token; ARGV[5] quarantine_ms: restart
-- quarantine (ms, '0' off); ARGV[6] grant: this request's id, the grant's; ARGV[7]
-- latch_ms: grant latch lifetime (ms): a retry of
-- this request gets the same grant back.
-- Readers share the lock; the writer may also read (downgrade); anyone else waits.
-- Reply: '<holds>:<token>:<origin>' when held; {0, pttl} when a writer holds it; {4, ms} while
-- the restart quarantine lasts; {5, 0} when this acquisition is over (its grant ended).
local again = grant_replayed()
if type(again) == 'table' then
    -- The acquisition is over.
    return again
end
local quarantined = quarantine_left(KEYS[3], ARGV[5])
if quarantined > 0 then
    return {4, quarantined}
end
if again then
    -- Found again: the grant back while it lives; nothing once it ended, by its release,
    -- its own lease, or an operator's force-release (which deletes the lock, not the
    -- owner's grants hash).
    if grant_alive(now_ms()) and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
        return again
    end
    redis.call('set', KEYS[#KEYS], 'r-1', 'px', ARGV[#ARGV])
    return {5, 0}
end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false or mode == 'read'
    or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2] .. ':write') == 1) then
    if mode == false then
        redis.call('hset', KEYS[1], 'mode', 'read')
    end
    -- Holds whose own leases ended no longer count (see live_reads).
    local holds = live_reads(KEYS[1], ARGV[2], ARGV[3]) + 1
    redis.call('hset', KEYS[1], ARGV[2], holds)
    redis.call('set', ARGV[3] .. ':' .. holds, 1, 'px', ARGV[1])
    if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
        redis.call('pexpire', KEYS[1], ARGV[1])
    end
    local origin = record_grant(holds == 1, ARGV[1], now_ms() + tonumber(ARGV[1]))
    local token = 0
    if ARGV[4] == '1' then
        if holds == 1 then
            token = next_token(KEYS[2])
        else
            token = tonumber(redis.call('get', KEYS[2]) or 0)
        end
    end
    return granted(holds, token, origin)
end
return {0, redis.call('pttl', KEYS[1])}
