-- Describes a lock for introspection; reads only.
-- KEYS[1] lock: lock hash; KEYS[2] queue: fair queue; KEYS[3] waiting: waiting clients
-- (see wake_mutex_waiters); KEYS[4] token: fencing counter. ARGV[1] grants_prefix: what
-- comes before a field in its grants hash's key (`redisson_lock_grants:{name}:`); ARGV[2]
-- holds_prefix: what comes before an owner in its read holds'
-- keys (`{name}:`).
-- Reply: {type of KEYS[1], mode, pttl, waiting, last token, {field, holds, since ms
-- ('' unknown), longest read hold's pttl (-1 none), ...}}.
local kind = redis.call('type', KEYS[1]).ok
local waiting = redis.call('llen', KEYS[2]) + redis.call('zcard', KEYS[3])
local token = redis.call('get', KEYS[4]) or '0'
if kind ~= 'hash' then
    return {kind, '', -2, waiting, token, {}}
end
local mode = redis.call('hget', KEYS[1], 'mode') or ''
local fields = redis.call('hgetall', KEYS[1])
local holders = {}
for i = 1, #fields, 2 do
    local field, holds = fields[i], fields[i + 1]
    if field ~= 'mode' then
        local since = redis.call('hget', ARGV[1] .. field, 's')
        local sole = not since and sole_request(field)
        if sole then
            -- A sole grant's latch keeps when its hold began (see sole_grant).
            local latch = latch_of(KEYS[1], sole)
            local began = began_ms(latch, redis.call('get', latch) or '')
            if began then
                since = string.format('%d', began)
            end
        end
        since = since or ''
        local lease = -1
        if mode == 'read' and string.sub(field, -6) ~= ':write' then
            for n = 1, tonumber(holds) or 0 do
                local left = redis.call('pttl', ARGV[2] .. field .. ':rwlock_timeout:' .. n)
                if left > lease then
                    lease = left
                end
            end
        end
        table.insert(holders, field)
        table.insert(holders, holds)
        table.insert(holders, since)
        table.insert(holders, lease)
    end
end
return {kind, mode, redis.call('pttl', KEYS[1]), waiting, token, holders}
