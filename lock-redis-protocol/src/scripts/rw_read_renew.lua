-- Re-arms every live read hold of each lock's owner, and the lock itself, to at least
-- the lease (never shorter: a hold with a longer lease of its own keeps it).
-- KEYS[2i - 1] lock: lock hash; KEYS[2i] grants: its owner's grants hash (the grants' own expiries are
-- extended as the hold keys are); ARGV[1] lease_ms: lease (ms); ARGV[2i] owner: owner of KEYS[2i
-- - 1];
-- ARGV[2i + 1] hold_prefix: the hold-key prefix of that owner ('{name}:<owner>:rwlock_timeout').
-- Reply: one per lock: the grant that began the owner's read hold (1 when its record
-- names none), or 0 when it holds nothing.
local lease = tonumber(ARGV[1])
local renewed = {}
local until_ms = now_ms() + lease
for i = 1, #KEYS / 2 do
    local key, grants = KEYS[2 * i - 1], KEYS[2 * i]
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
        local records = redis.call('hgetall', grants)
        for r = 1, #records, 2 do
            local origin, expiry = string.match(records[r + 1], '^(%x+):(%d+)$')
            if origin and tonumber(expiry) < until_ms then
                redis.call('hset', grants, records[r], origin .. ':' .. until_ms)
            end
        end
        if lease_left(grants) < lease then
            redis.call('pexpire', grants, lease)
        end
        renewed[i] = redis.call('hget', grants, 'o') or 1
    else
        renewed[i] = 0
    end
end
return renewed
