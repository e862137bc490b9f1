-- Re-arms the lease of every lock its owner still holds, and of the hold's grants.
-- KEYS[2i - 1] lock: lock hash; KEYS[2i] grants: its owner's grants hash; ARGV[1] lease_ms: lease (ms);
-- ARGV[i + 1] owner: owner of KEYS[2i - 1].
-- Reply per lock: the grant that began the owner's hold when renewed (its grants hash
-- names it, or the owner does for a sole grant; 1 when neither does, as for a hold
-- another library took), 0 not held (including a key of another type). A client whose
-- hold began with another grant learns that its own hold ended and the owner's next one
-- began.
local lease = tonumber(ARGV[1])
local renewed = {}
for i = 1, #KEYS / 2 do
    local key = KEYS[2 * i - 1]
    local held = redis.pcall('hexists', key, ARGV[i + 1])
    if held == 1 then
        local sole = sole_request(ARGV[i + 1])
        if redis.call('pttl', key) < lease then
            redis.call('pexpire', key, lease)
            redis.call('pexpire', KEYS[2 * i], lease)
            if sole then
                -- A sole grant's latch keeps when its hold began (see sole_grant).
                local latch = latch_of(key, sole)
                if redis.call('pttl', latch) < lease then
                    redis.call('pexpire', latch, lease)
                end
            end
        end
        renewed[i] = redis.call('hget', KEYS[2 * i], 'o') or sole or 1
    else
        renewed[i] = 0
    end
end
return renewed
