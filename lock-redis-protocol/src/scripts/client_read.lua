-- Reads what a client said about itself (nil when it said nothing, or long ago).
-- KEYS[1] client: the client's key.
return redis.call('get', KEYS[1])
