-- Counts a latch down once (Redisson's countDown), remembering the answer for retries.
-- KEYS[1] latch: the latch; KEYS[2] answer: this request's answer; KEYS[3] marker: its
-- kind marker; ARGV[1] channel: channel; ARGV[2] publish: publish command; ARGV[3]
-- answer_ms: how long the answer is remembered (ms); ARGV[4] java_channel: Java's channel
-- when
-- it is another one, else ''.
-- Reply: the count left; reaching exactly 0 deletes the latch and publishes '0'.
local before = redis.call('get', KEYS[2])
if before then
    return tonumber(before)
end
check_kind(KEYS[1], KEYS[3], 'latch')
local left = 0
if redis.call('get', KEYS[1]) then
    left = redis.call('decr', KEYS[1])
    if left <= 0 then
        redis.call('del', KEYS[1], KEYS[3])
        if left == 0 then
            publish_latch(ARGV[2], ARGV[1], ARGV[4], '0')
        end
        left = 0
    end
end
redis.call('set', KEYS[2], left, 'px', ARGV[3])
return left
