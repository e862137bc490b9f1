-- Re-arms the lease of every lock its owner still holds.
-- KEYS[i] lock hash; ARGV[1] lease (ms); ARGV[i + 1] owner of KEYS[i].
-- Reply: one integer per key, 1 renewed, 0 not held (including a key of another type).
local lease = tonumber(ARGV[1])
local renewed = {}
for i, key in ipairs(KEYS) do
    local held = redis.pcall('hexists', key, ARGV[i + 1])
    if held == 1 then
        if redis.call('pttl', key) < lease then
            redis.call('pexpire', key, lease)
        end
        renewed[i] = 1
    else
        renewed[i] = 0
    end
end
return renewed
