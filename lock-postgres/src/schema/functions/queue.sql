-- Whether a waiter of `p_name` (other than a fair one, which `waiters` keeps) may be
-- listening: one was told the name is busy and has not outlived the time it was given.
-- A registration that ran out is removed.
CREATE OR REPLACE FUNCTION {schema}.anyone_listening(p_name text, p_now timestamptz)
RETURNS boolean LANGUAGE plpgsql
    AS $$
DECLARE
    v_until timestamptz;
BEGIN
    SELECT until INTO v_until FROM {schema}.listening WHERE name = p_name;
    IF NOT FOUND THEN
        RETURN false;
    ELSIF v_until <= p_now THEN
        DELETE FROM {schema}.listening WHERE name = p_name AND until <= p_now;
        RETURN false;
    END IF;
    RETURN true;
END $$;

-- The first waiter of `p_name` that still keeps its place (all NULL without one); the
-- waiters before it, whose place lapsed, leave the queue. Read first: most calls find
-- the queue empty, and a DELETE that finds nothing costs as much as one that does.
CREATE OR REPLACE FUNCTION {schema}.queue_head(p_name text, p_now timestamptz)
RETURNS {schema}.waiters LANGUAGE plpgsql
    AS $$
DECLARE
    v_head {schema}.waiters%ROWTYPE;
BEGIN
    SELECT * INTO v_head FROM {schema}.waiters WHERE name = p_name ORDER BY arrived LIMIT 1;
    IF FOUND AND v_head.alive_until <= p_now THEN
        DELETE FROM {schema}.waiters WHERE name = p_name AND alive_until <= p_now;
        SELECT * INTO v_head FROM {schema}.waiters WHERE name = p_name
         ORDER BY arrived LIMIT 1;
    END IF;
    RETURN v_head;
END $$;

-- Hands a free `p_name` over to its first waiter that still keeps its place, and tells
-- it: the hold is the waiter's acquisition's (its request id, its lease asked, fencing
-- as it asked), marked `handed` and lasting only the waiter's place (or its lease, if
-- shorter), until the waiter's next attempt, under the same id, finds it and takes it up
-- with its full lease. The message, 'handed:<request id>:<token>:<attempt>' (the attempt
-- whose place the hold lasts, a token of 0 for none), lets the waiter hold from its
-- arrival, as the commit that sends it made the hold durable, and take the hold up in
-- the background. A waiter that has gone (gave up, crashed, paused) loses it when that
-- lapses, or at once when it cancels. A waiter of a client that asks under a new id
-- every attempt (`request` NULL), or one during the failover quarantine, is only woken
-- ('one').
CREATE OR REPLACE FUNCTION {schema}.hand_over(p_name text, p_now timestamptz)
RETURNS void LANGUAGE plpgsql
    AS $$
DECLARE
    v_head {schema}.waiters%ROWTYPE;
    v_token bigint := 0;
BEGIN
    v_head := {schema}.queue_head(p_name, p_now);
    IF v_head.owner IS NULL THEN
        RETURN;
    END IF;
    IF v_head.request IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM {schema}.holds WHERE name = p_name)
       AND {schema}.quarantine(p_now, v_head.lease_ms) IS NULL THEN
        DELETE FROM {schema}.waiters WHERE name = p_name AND owner = v_head.owner;
        IF v_head.fencing THEN
            v_token := {schema}.next_token(p_name, p_now);
        END IF;
        -- The place, or the waiter's lease if shorter: a holder that dies is replaced
        -- within its own lease, handed or not.
        INSERT INTO {schema}.holds
               (name, owner, kind, holds, expires_at, origin, grants, token, handed)
        VALUES (p_name, v_head.owner, 'mutex', 1,
                least(v_head.alive_until, p_now + v_head.lease_ms * interval '1 millisecond'),
                v_head.request, ARRAY[v_head.request], v_token, true);
        PERFORM {schema}.notify(v_head.channel, 'handed:'
            || replace(v_head.request::text, '-', '') || ':' || v_token || ':'
            || coalesce(v_head.attempt, 0));
        RETURN;
    END IF;
    PERFORM {schema}.notify(v_head.channel, 'one');
END $$;

-- The mutex and the fair lock when not this owner's already: the first waiter in the
-- queue goes first; a waiter (`p_waits`, or queued before) keeps its place for
-- `p_place_ms` and is told to ask again within a third of that; its wake-ups come on
-- `p_channel`. A waiter that asks under one id for its whole acquisition
-- (`p_handover`) is handed the lock on release (see hand_over).
CREATE OR REPLACE FUNCTION {schema}.acquire_fair(
    p_name text, p_owner text, p_lease_ms bigint, p_fencing boolean, p_request uuid,
    p_waits boolean, p_place_ms bigint, p_channel text, p_handover boolean, p_attempt integer,
    p_now timestamptz
) RETURNS bigint[] LANGUAGE plpgsql
    AS $$
DECLARE
    v_head {schema}.waiters%ROWTYPE;
    v_queued boolean;
    v_sleep bigint;
BEGIN
    v_head := {schema}.queue_head(p_name, p_now);
    IF NOT EXISTS (SELECT 1 FROM {schema}.holds WHERE name = p_name)
       AND (v_head.owner IS NULL OR v_head.owner = p_owner) THEN
        -- With a live head the caller is it; with none the queue is empty (queue_head
        -- removed the lapsed), and the uncontended path deletes nothing.
        IF v_head.owner IS NOT NULL THEN
            DELETE FROM {schema}.waiters WHERE name = p_name AND owner = p_owner;
        END IF;
        RETURN {schema}.grant_hold(p_name, p_owner, 'mutex', p_lease_ms, p_fencing, p_request,
                                   true, p_now);
    END IF;
    -- Whether the caller waits in the queue from now on: it asks to, or it was queued
    -- before (looked up only when it does not ask: one statement less per waiter).
    v_queued := p_waits OR EXISTS (SELECT 1 FROM {schema}.waiters
                                    WHERE name = p_name AND owner = p_owner);
    IF v_queued THEN
        INSERT INTO {schema}.waiters AS w
               (name, owner, channel, alive_until, request, lease_ms, fencing, attempt)
        VALUES (p_name, p_owner, p_channel, p_now + p_place_ms * interval '1 millisecond',
                CASE WHEN p_handover THEN p_request END, p_lease_ms, p_fencing, p_attempt)
        ON CONFLICT (name, owner) DO UPDATE
           SET alive_until = excluded.alive_until, channel = excluded.channel,
               request = excluded.request, lease_ms = excluded.lease_ms,
               fencing = excluded.fencing, attempt = excluded.attempt;
        IF v_head.owner IS NULL THEN
            SELECT * INTO v_head FROM {schema}.waiters WHERE name = p_name
             ORDER BY arrived LIMIT 1;
        END IF;
    END IF;
    -- Busy until the holds end, or, when free, until the head's place lapses.
    v_sleep := coalesce(({schema}.busy(p_name, p_now))[2],
        ceil(extract(epoch FROM v_head.alive_until - p_now) * 1000)::bigint,
        p_place_ms);
    IF v_queued THEN
        v_sleep := least(v_sleep, greatest(1, p_place_ms / 3));
    END IF;
    RETURN ARRAY[0, v_sleep, 0];
END $$;


-- An owner's last hold of kind `p_kind` on `p_name` went: a mutex or a fair lock is handed
-- over to its first waiter; a writer's release wakes every waiter on `p_channel`, the
-- last reader's one.
CREATE OR REPLACE FUNCTION {schema}.last_hold_went(
    p_name text, p_kind text, p_channel text, p_now timestamptz
) RETURNS void LANGUAGE plpgsql
    AS $$
BEGIN
    IF p_kind IN ('mutex', 'fair') THEN
        PERFORM {schema}.hand_over(p_name, p_now);
    ELSIF NOT {schema}.anyone_listening(p_name, p_now) THEN
        -- Nobody to wake: no NOTIFY, whose commit takes a lock every notifying
        -- transaction of the database queues on.
        NULL;
    ELSIF p_kind = 'write' THEN
        PERFORM {schema}.notify(p_channel, 'all');
    ELSIF NOT EXISTS (SELECT 1 FROM {schema}.holds WHERE name = p_name) THEN
        PERFORM {schema}.notify(p_channel, 'one');
    END IF;
END $$;
