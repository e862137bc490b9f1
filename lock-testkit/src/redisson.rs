//! Redisson's own lock scripts, as a Redisson client sends them (from Redisson's
//! documented behaviour, see `REDISSON-SEMANTICS.md`): the peers of the interop tests
//! and a floor of the benchmark run them beside ours.

/// Redisson's lock script (`tryLockInnerAsync`). `KEYS[1]` the lock's hash; `ARGV[1]` the
/// lease (ms), `ARGV[2]` the owner. Nil when taken, else the lock's PTTL.
pub const LOCK: &str = "\
if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then \
    redis.call('hincrby', KEYS[1], ARGV[2], 1); \
    redis.call('pexpire', KEYS[1], ARGV[1]); \
    return nil; \
end; \
return redis.call('pttl', KEYS[1]);";

/// Redisson's unlock script (`unlockInnerAsync`, 3.24 on), with its unlock latch.
/// `KEYS[1]` the lock's hash, `KEYS[2]` its channel, `KEYS[3]` the unlock latch; `ARGV[1]` the
/// unlock message, `ARGV[2]` the lease (ms), `ARGV[3]` the owner, `ARGV[4]` the publish
/// command, `ARGV[5]` the latch's lifetime (ms). 1 released, 0 holds left, nil not held.
pub const UNLOCK: &str = "\
local val = redis.call('get', KEYS[3]); \
if val ~= false then return tonumber(val); end; \
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end; \
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); \
if (counter > 0) then \
    redis.call('pexpire', KEYS[1], ARGV[2]); \
    redis.call('set', KEYS[3], 0, 'px', ARGV[5]); \
    return 0; \
else \
    redis.call('del', KEYS[1]); \
    redis.call(ARGV[4], KEYS[2], ARGV[1]); \
    redis.call('set', KEYS[3], 1, 'px', ARGV[5]); \
    return 1; \
end;";
