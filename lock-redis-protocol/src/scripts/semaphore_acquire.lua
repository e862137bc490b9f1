-- Takes permits if that many are available and no starving waiter's reservation holds
-- them back (Redisson's tryAcquire(n), plus may_take), keeping the grant under this
-- request's id for as long as the permits are held (see semaphore_release).
-- KEYS[1] semaphore: the semaphore; KEYS[2] grant: this request's grant; KEYS[3]
-- reservation: the reservation; KEYS[4] marker: its kind marker; KEYS[5] peak: its peak;
-- ARGV[1] permits: permits; ARGV[2] waiter: the waiter ('' when not starving); ARGV[3]
-- waited_ms: how long it has waited (ms); ARGV[4] reservation_ms: how long a reservation
-- is kept
-- (ms). Reply: 1 taken, 0 not now, 2 more than the semaphore's peak (see may_take).
-- The grant holds the number of permits, or 'r<count>' once they were given back: the
-- request sent again answers 1 while they are held, and a late copy takes nothing.
local grant = redis.call('get', KEYS[2])
if grant then
    if string.sub(grant, 1, 1) == 'r' then
        return 0
    end
    return 1
end
check_kind(KEYS[1], KEYS[4], 'semaphore')
local count = tonumber(redis.call('get', KEYS[1]) or false)
if count == nil then
    return 2
end
local wanted = tonumber(ARGV[1])
local answer = may_take(KEYS[3], KEYS[5], count, wanted, ARGV[2], ARGV[3], ARGV[4])
if answer ~= 1 then
    return answer
end
redis.call('decrby', KEYS[1], wanted)
redis.call('set', KEYS[2], wanted)
return 1
