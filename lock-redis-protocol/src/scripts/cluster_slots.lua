-- The cluster's slot ranges and their masters, to walk every master's keys.
-- KEYS[1] route: routes the call and is not read.
return redis.call('cluster', 'slots')
