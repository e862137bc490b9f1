-- Takes the lock, or one more hold of it, for an owner.
-- KEYS[1] lock hash; ARGV[1] lease (ms); ARGV[2] owner.
-- The expiry is only ever extended, never shortened, so that a client's local view of
-- its lease (the latest request it sent plus that request's lease) stays on the safe side.
-- Reply: {1, holds} when the owner now holds it; {0, pttl} when someone else does.
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    local holds = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    -- Extend only: a reentry with a shorter lease must not cut an outer hold's lease.
    if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
        redis.call('pexpire', KEYS[1], ARGV[1])
    end
    return {1, holds}
end
return {0, redis.call('pttl', KEYS[1])}
