-- Gives permits back (Redisson's release(n): INCRBY, creating the key), remembering the
-- answer for retries of the same request.
-- KEYS[1] the semaphore; KEYS[2] this request's answer; ARGV[1] permits; ARGV[2]
-- channel; ARGV[3] publish; ARGV[4] how long the answer is remembered (ms).
-- Reply: the count after, published.
local before = redis.call('get', KEYS[2])
if before then
    return tonumber(before)
end
local count = redis.call('incrby', KEYS[1], ARGV[1])
redis.call(ARGV[3], ARGV[2], count)
redis.call('set', KEYS[2], count, 'px', ARGV[4])
return count
