-- Takes permits if that many are available (Redisson's tryAcquire(n)), remembering a
-- grant for retries of the same request.
-- KEYS[1] the semaphore; KEYS[2] this request's answer; ARGV[1] permits; ARGV[2] how
-- long the answer is remembered (ms). Reply: 1 taken, 0 too few.
if redis.call('get', KEYS[2]) then
    return 1
end
local count = tonumber(redis.call('get', KEYS[1]) or false)
local wanted = tonumber(ARGV[1])
if count == nil or count < wanted then
    return 0
end
redis.call('decrby', KEYS[1], wanted)
redis.call('set', KEYS[2], 1, 'px', ARGV[2])
return 1
