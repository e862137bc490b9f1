-- Renews issued permits: extends their expiry to a lease from now, never shortening it
-- (the watchdog's batch: a renewal that lands late must not cut a lease set since), or
-- sets it exactly (Redisson's updateLeaseTime), after reclaiming expired ones.
-- KEYS[1] semaphore: the semaphore; KEYS[2] issued: its issued permits; ARGV[1] channel:
-- channel; ARGV[2] publish: publish; ARGV[3] lease_ms: lease (ms); ARGV[4] exact: '1' to
-- set the expiry exactly, '0' to extend only;
-- ARGV[5..] id: the ids (hex). Reply: per id, 1 renewed, 0 not issued.
local now = reclaim_permits(KEYS[1], KEYS[2], ARGV[1], ARGV[2])
local expiry = now + tonumber(ARGV[3])
local exactly = ARGV[4] == '1'
local renewed = {}
for i = 5, #ARGV do
    local id = permit_bytes(ARGV[i])
    local score = redis.call('zscore', KEYS[2], id)
    if score then
        if exactly or tonumber(score) < expiry then
            redis.call('zadd', KEYS[2], 'xx', expiry, id)
        end
        renewed[#renewed + 1] = 1
    else
        renewed[#renewed + 1] = 0
    end
end
return renewed
