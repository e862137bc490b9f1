-- A latch's count (Redisson's getCount). KEYS[1] latch: the latch; KEYS[2] marker: its
-- kind marker.
-- Reply: the count, 0 if open.
check_kind(KEYS[1], KEYS[2], 'latch')
return tonumber(redis.call('get', KEYS[1]) or '0')
