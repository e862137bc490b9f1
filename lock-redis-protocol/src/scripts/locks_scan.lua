-- One step of a walk over this server's lock hashes whose names match a pattern; never
-- blocks the server for long (SCAN, a step at a time).
-- KEYS[1] route: routes the call to a server of a cluster and is not read. ARGV[1]
-- cursor: cursor; ARGV[2] pattern: pattern; ARGV[3] step: how many keys a step looks at.
-- Reply: {next cursor ('0' when done), {name, ...}}: hashes with a lease (a lock always
-- has one), not this library's or Redisson's own keys.
-- Function flags: allow-cross-slot-keys (it reads keys of every slot of its server).
local step = redis.call('scan', ARGV[1], 'match', ARGV[2], 'count', ARGV[3], 'type', 'hash')
local names = {}
for _, key in ipairs(step[2]) do
    if string.sub(key, 1, 9) ~= 'redisson_' and redis.call('pttl', key) > 0 then
        table.insert(names, key)
    end
end
return {step[1], names}
