-- Ends a grant of permits (see semaphore_acquire): gives its permits back (INCRBY, as
-- Redisson's release(n)) if it holds them, and remembers the answer in the grant's place
-- as 'r<count>' for the retry window. A grant not held changes nothing (its end is
-- remembered all the same, so that a late copy of its acquisition takes nothing); sent
-- again, it answers as the first time.
-- KEYS[1] semaphore: the semaphore; KEYS[2] grant: the grant; KEYS[3] marker: its kind
-- marker; ARGV[1] channel: channel; ARGV[2] publish: publish; ARGV[3] answer_ms: how long
-- the answer is remembered (ms).
-- Reply: the count after, published when permits came back.
local grant = redis.call('get', KEYS[2])
if grant and string.sub(grant, 1, 1) == 'r' then
    return tonumber(string.sub(grant, 2))
end
check_kind(KEYS[1], KEYS[3], 'semaphore')
local count
if grant then
    count = redis.call('incrby', KEYS[1], grant)
    redis.call(ARGV[2], ARGV[1], count)
else
    count = tonumber(redis.call('get', KEYS[1]) or 0)
end
redis.call('set', KEYS[2], 'r' .. count, 'px', ARGV[3])
return count
