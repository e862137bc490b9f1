-- Adds permits, possibly negative (Redisson's addPermits: a plain SET of the new count).
-- KEYS[1] semaphore: the semaphore; KEYS[2] marker: its kind marker; KEYS[3] peak: its
-- peak (see may_take: a count lowered starts it again); ARGV[1] delta: delta; ARGV[2]
-- channel: channel; ARGV[3] publish: publish.
-- Reply: the new count, published.
check_kind(KEYS[1], KEYS[2], 'semaphore')
local count = tonumber(redis.call('get', KEYS[1]) or '0') + tonumber(ARGV[1])
redis.call('set', KEYS[1], count)
redis.call('set', KEYS[2], 'semaphore')
if tonumber(ARGV[1]) < 0 then
    redis.call('set', KEYS[3], math.max(count, 0))
end
redis.call(ARGV[3], ARGV[2], count)
return count
