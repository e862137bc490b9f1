-- Sets a count-down latch's count if it is open (Redisson's trySetCount).
-- KEYS[1] latch: the latch (a string); KEYS[2] marker: its kind marker; ARGV[1] count:
-- count; ARGV[2] channel: channel; ARGV[3] publish: publish command; ARGV[4]
-- java_channel: Java's channel when it is another one, else ''.
-- Reply: 1 set (listeners told '1': closed again), 0 it was counting.
-- GET, not EXISTS: a key of another type (a lock's hash) is a WRONGTYPE error.
check_kind(KEYS[1], KEYS[2], 'latch')
if redis.call('get', KEYS[1]) then
    return 0
end
redis.call('set', KEYS[1], ARGV[1])
redis.call('set', KEYS[2], 'latch')
publish_latch(ARGV[3], ARGV[2], ARGV[4], '1')
return 1
