-- A latch's count (Redisson's getCount). KEYS[1] the latch. Reply: the count, 0 if open.
return tonumber(redis.call('get', KEYS[1]) or '0')
