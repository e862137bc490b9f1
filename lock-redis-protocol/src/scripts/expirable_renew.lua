-- Sets the expiry of issued permits to a lease from now (Redisson's updateLeaseTime, for
-- many ids at once: the watchdog's batch), after reclaiming expired ones.
-- KEYS[1] the semaphore; KEYS[2] its issued permits; ARGV[1] channel; ARGV[2] publish;
-- ARGV[3] lease (ms); ARGV[4..] the ids (hex). Reply: per id, 1 renewed, 0 not issued.
local now = reclaim_permits(KEYS[1], KEYS[2], ARGV[1], ARGV[2])
local expiry = now + tonumber(ARGV[3])
local renewed = {}
for i = 4, #ARGV do
    local id = permit_bytes(ARGV[i])
    if redis.call('zscore', KEYS[2], id) then
        redis.call('zadd', KEYS[2], 'xx', expiry, id)
        renewed[#renewed + 1] = 1
    else
        renewed[#renewed + 1] = 0
    end
end
return renewed
