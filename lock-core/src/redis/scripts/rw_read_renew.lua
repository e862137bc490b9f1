-- Re-arms every read hold of each lock's owner, and the lock itself.
-- KEYS[i] lock hash; ARGV[1] lease (ms); ARGV[2i] owner of KEYS[i];
-- ARGV[2i + 1] the hold-key prefix of that owner ('{name}:<owner>:rwlock_timeout').
-- Reply: one integer per key, 1 renewed, 0 not held.
local lease = tonumber(ARGV[1])
local renewed = {}
for i, key in ipairs(KEYS) do
    local holds = tonumber(redis.pcall('hget', key, ARGV[2 * i]))
    if holds and holds > 0 then
        for n = 1, holds do
            redis.call('pexpire', ARGV[2 * i + 1] .. ':' .. n, lease)
        end
        if redis.call('pttl', key) < lease then
            redis.call('pexpire', key, lease)
        end
        renewed[i] = 1
    else
        renewed[i] = 0
    end
end
return renewed
