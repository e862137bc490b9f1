-- Records what a client says about itself, for introspection.
-- KEYS[1] client: the client's key (`redisson_lock_client:<client id>`); ARGV[1]
-- description: its description; ARGV[2] lives_ms: how long it lives (ms).
redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
return 1
