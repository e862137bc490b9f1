-- The available permits (Redisson's availablePermits), or takes them all (drainPermits:
-- set 0, answer what was there, nothing published).
-- KEYS[1] semaphore: the semaphore; KEYS[2] marker: its kind marker; KEYS[3] peak: its
-- peak (see may_take: a drain starts it again); ARGV[1] action: 'drain' or 'read'. Reply:
-- the count found.
check_kind(KEYS[1], KEYS[2], 'semaphore')
local count = redis.call('get', KEYS[1])
if not count then
    return 0
end
if ARGV[1] == 'drain' then
    redis.call('set', KEYS[1], 0)
    redis.call('set', KEYS[3], 0)
end
return tonumber(count)
