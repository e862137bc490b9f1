-- A client's waiter for a mutex gives up: the client's registration goes, and so does an
-- offer of the lock to it; if the lock is free the next waiter is woken (this client may
-- have been the one a release told, and that wake-up must not be lost with it).
-- KEYS[1] lock hash; KEYS[2] waiting clients and KEYS[3] reservation (see
-- wake_mutex_waiters).
-- ARGV[1] the client's wake id; ARGV[2] channel; ARGV[3] publish command; ARGV[4]
-- listener count subcommand of PUBSUB ('' to tell every listener); ARGV[5] how long the
-- lock is offered to a client woken alone (ms).
-- Reply: 1 if the client was registered, else 0.
local removed = redis.call('zrem', KEYS[2], ARGV[1])
local reserved = redis.call('get', KEYS[3])
if reserved and string.sub(reserved, -#ARGV[1]) == ARGV[1] then
    redis.call('del', KEYS[3])
end
if redis.call('exists', KEYS[1]) == 0 then
    wake_mutex_waiters(KEYS[2], ARGV[2], ARGV[3], ARGV[4], KEYS[3], ARGV[5])
end
return removed
