-- Shared helpers: each script carries those it calls (see script/prelude.rs).

local function now_ms()
    local time = redis.call('time')
    return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- A fresh fencing token. A missing counter (never used, or lost with the server's data)
-- starts from the server clock in microseconds, so that tokens keep increasing across a
-- restart that lost the counter (as long as the clock does not go back).
local function next_token(key)
    if redis.call('exists', key) == 0 then
        local time = redis.call('time')
        redis.call('set', key, tonumber(time[1]) * 1000000 + tonumber(time[2]))
    end
    return redis.call('incr', key)
end

-- Milliseconds left of the quarantine after the server (re)started, 0 when over or off.
-- The epoch key holds '<replication id>:<ms>': the dataset history this server began
-- granting in, and when; once the quarantine is over, the replication id alone. The
-- replication id (`master_replid`) changes whenever the data may have gone back in time:
-- every start of the server process (a snapshot, or an AOF written every second, comes
-- back without the latest grants), every promotion of a replica (a failover, or a
-- failback after a full resync from another master). Grants then wait one quarantine
-- (at least the longest lease), so that no holder from before may still believe it
-- holds a lock granted again. A fresh server (no epoch) waits it too. The first client
-- to find the quarantine over ends it for every client of the server: give them all the
-- same setting. Outside a quarantine a check costs `INFO replication` and one GET (about
-- 1.6 us of server time); `INFO server`, for the run id, costs more and misses the
-- rollbacks that need no restart.
local function quarantine_left(epoch_key, quarantine_ms)
    if quarantine_ms == '0' then
        return 0
    end
    -- A plain find and a fixed-length cut: a pattern match costs the script 0.6 us more.
    local info = redis.call('info', 'replication')
    local at = string.find(info, 'master_replid:', 1, true)
    local history = at and string.sub(info, at + 14, at + 53) or ''
    local epoch = redis.call('get', epoch_key)
    if epoch == history then
        return 0
    end
    local started
    if epoch then
        local sep = string.find(epoch, ':', 1, true)
        if sep and string.sub(epoch, 1, sep - 1) == history then
            started = tonumber(string.sub(epoch, sep + 1))
        end
    end
    local now = now_ms()
    if not started then
        redis.call('set', epoch_key, history .. ':' .. now)
        started = now
    end
    local left = started + tonumber(quarantine_ms) - now
    if left <= 0 then
        redis.call('set', epoch_key, history)
        return 0
    end
    return left
end
