-- The available and issued permits of an expirable semaphore (Redisson's
-- availablePermits), after reclaiming expired ones.
-- KEYS[1] semaphore: the semaphore; KEYS[2] issued: its issued permits; ARGV[1] channel:
-- channel; ARGV[2] publish: publish.
-- Reply: {available, issued}.
reclaim_permits(KEYS[1], KEYS[2], ARGV[1], ARGV[2])
local count = tonumber(redis.call('get', KEYS[1]) or '0')
return {count, redis.call('zcard', KEYS[2])}
