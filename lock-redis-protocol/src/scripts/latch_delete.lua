-- Deletes a latch (Redisson's delete). KEYS[1] latch: the latch; KEYS[2] marker: its kind
-- marker; ARGV[1] channel: channel; ARGV[2] publish: publish command; ARGV[3]
-- java_channel: Java's channel when it is another one, else ''.
-- Reply: 1 deleted (listeners told '1', as Redisson does), 0 none.
-- GET first: a key of another type (a lock's hash) is a WRONGTYPE error, never deleted.
check_kind(KEYS[1], KEYS[2], 'latch')
if not redis.call('get', KEYS[1]) then
    return 0
end
redis.call('del', KEYS[1], KEYS[2])
publish_latch(ARGV[2], ARGV[1], ARGV[3], '1')
return 1
