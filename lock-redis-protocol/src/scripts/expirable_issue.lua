-- Issues permits with ids and a lease (Redisson's PermitExpirableSemaphore tryAcquire),
-- after reclaiming expired ones. Ids already issued are a retry of this request: issued.
-- Nothing is issued during the restart quarantine, as no lock is granted: a server that
-- lost its data must not hand out permits that holders from before still believe theirs.
-- A starving waiter's reservation holds permits back as for the plain semaphore.
-- KEYS[1] semaphore: the semaphore; KEYS[2] issued: its issued permits (zset id -> expiry
-- ms); KEYS[3] epoch: the restart epoch; KEYS[4] reservation: the reservation; KEYS[5]
-- marker: the count's kind marker; KEYS[6] peak: its peak; ARGV[1] channel: channel;
-- ARGV[2] publish: publish; ARGV[3] lease_ms: lease (ms); ARGV[4] quarantine_ms: restart
-- quarantine (ms, '0' off); ARGV[5] waiter: the waiter ('' when not starving); ARGV[6]
-- waited_ms: how long it has waited (ms); ARGV[7] reservation_ms: how long a reservation
-- is kept
-- (ms); ARGV[8..] id: the ids (hex).
-- Reply: {1} issued; {2, total} more asked than available and issued together;
-- {0, ms until the first issued permit expires} or {0} too few available; {3, ms} the
-- quarantine's time left.
check_kind(KEYS[1], KEYS[5], 'semaphore')
local now = reclaim_permits(KEYS[1], KEYS[2], ARGV[1], ARGV[2])
if redis.call('zscore', KEYS[2], permit_bytes(ARGV[8])) then
    return {1}
end
local quarantined = quarantine_left(KEYS[3], ARGV[4])
if quarantined > 0 then
    return {3, quarantined}
end
local wanted = #ARGV - 7
local count = tonumber(redis.call('get', KEYS[1]) or false)
if count ~= nil and may_take(KEYS[4], KEYS[6], count, wanted, ARGV[5], ARGV[6], ARGV[7]) == 1 then
    redis.call('decrby', KEYS[1], wanted)
    local expiry = now + tonumber(ARGV[3])
    for i = 8, #ARGV do
        redis.call('zadd', KEYS[2], expiry, permit_bytes(ARGV[i]))
    end
    return {1}
end
if count ~= nil then
    local total = count + redis.call('zcard', KEYS[2])
    if wanted > total then
        return {2, total}
    end
end
local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
if first[2] then
    return {0, math.max(0, tonumber(first[2]) - now)}
end
return {0}
