-- Sets a semaphore's permits if it has none (Redisson's trySetPermits).
-- KEYS[1] semaphore: the semaphore (a string); KEYS[2] marker: its kind marker; KEYS[3]
-- peak: its peak (see may_take); ARGV[1] permits: permits; ARGV[2] channel: channel;
-- ARGV[3] publish: publish.
-- Reply: 1 set (listeners told the count), 0 already set. GET first: a key of another
-- type is a WRONGTYPE error.
check_kind(KEYS[1], KEYS[2], 'semaphore')
if redis.call('get', KEYS[1]) then
    return 0
end
redis.call('set', KEYS[1], ARGV[1])
redis.call('set', KEYS[2], 'semaphore')
redis.call('set', KEYS[3], ARGV[1])
redis.call(ARGV[3], ARGV[2], ARGV[1])
return 1
