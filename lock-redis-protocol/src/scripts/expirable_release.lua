-- Gives issued permits back (Redisson's release(ids)): all of them, or none when one is
-- not issued; remembers the answer for retries of the same request.
-- KEYS[1] semaphore: the semaphore; KEYS[2] issued: its issued permits; KEYS[3] answer:
-- this request's answer; ARGV[1] channel: channel; ARGV[2] publish: publish; ARGV[3]
-- answer_ms: how long the answer is remembered (ms);
-- ARGV[4..] id: the ids (hex). Reply: 1 given back (listeners told the new count), 0 not.
local before = redis.call('get', KEYS[3])
if before then
    return tonumber(before)
end
reclaim_permits(KEYS[1], KEYS[2], ARGV[1], ARGV[2])
for i = 4, #ARGV do
    if not redis.call('zscore', KEYS[2], permit_bytes(ARGV[i])) then
        redis.call('set', KEYS[3], 0, 'px', ARGV[3])
        return 0
    end
end
for i = 4, #ARGV do
    redis.call('zrem', KEYS[2], permit_bytes(ARGV[i]))
end
local count = redis.call('incrby', KEYS[1], #ARGV - 3)
redis.call(ARGV[2], ARGV[1], count)
redis.call('set', KEYS[3], 1, 'px', ARGV[3])
return 1
