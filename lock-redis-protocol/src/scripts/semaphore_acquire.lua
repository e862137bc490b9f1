-- Takes permits if that many are available and no starving waiter's reservation holds
-- them back (Redisson's tryAcquire(n), plus may_take), remembering a grant for retries of
-- the same request.
-- KEYS[1] the semaphore; KEYS[2] this request's answer; KEYS[3] the reservation; ARGV[1]
-- permits; ARGV[2] how long the answer is remembered (ms); ARGV[3] the waiter ('' when
-- not starving); ARGV[4] how long it has waited (ms); ARGV[5] how long a reservation is
-- kept (ms). Reply: 1 taken, 0 not.
if redis.call('get', KEYS[2]) then
    return 1
end
local count = tonumber(redis.call('get', KEYS[1]) or false)
local wanted = tonumber(ARGV[1])
if count == nil or not may_take(KEYS[3], count, wanted, ARGV[3], ARGV[4], ARGV[5]) then
    return 0
end
redis.call('decrby', KEYS[1], wanted)
redis.call('set', KEYS[2], 1, 'px', ARGV[2])
return 1
