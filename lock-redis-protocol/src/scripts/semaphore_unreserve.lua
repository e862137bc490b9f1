-- Ends a starving waiter's reservation of a semaphore's permits if it still holds it
-- (a waiter that gave up).
-- KEYS[1] reservation: the reservation; ARGV[1] waiter: the waiter. Reply: 1 ended, 0
-- held by no one or
-- another waiter.
local reservation = redis.call('get', KEYS[1])
if reservation and string.sub(reservation, 1, #ARGV[1] + 1) == ARGV[1] .. ':' then
    return redis.call('del', KEYS[1])
end
return 0
