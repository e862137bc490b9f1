-- Re-arms every live read hold of each lock's owner, and the lock itself, to at least
-- the lease (never shorter: a hold with a longer lease of its own keeps it).
-- KEYS[i] lock hash; ARGV[1] lease (ms); ARGV[2i] owner of KEYS[i];
-- ARGV[2i + 1] the hold-key prefix of that owner ('{name}:<owner>:rwlock_timeout').
-- Reply: one integer per key, 1 renewed, 0 not held.
local lease = tonumber(ARGV[1])
local renewed = {}
for i, key in ipairs(KEYS) do
    local holds = 0
    if redis.call('type', key)['ok'] == 'hash' then
        holds = live_reads(key, ARGV[2 * i], ARGV[2 * i + 1])
    end
    if holds > 0 then
        for n = 1, holds do
            local hold = ARGV[2 * i + 1] .. ':' .. n
            if lease_left(hold) < lease then
                redis.call('pexpire', hold, lease)
            end
        end
        if lease_left(key) < lease then
            redis.call('pexpire', key, lease)
        end
        renewed[i] = 1
    else
        renewed[i] = 0
    end
end
return renewed
