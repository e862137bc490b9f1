-- The lock operations. Each public function is one statement of the client, atomic, and
-- starts with `begin_op`: the name's transaction-scoped advisory lock (operations on one
-- name run one after the other), the answer of a request already run, and the removal
-- of what expired. Expiries are on the database clock (clock_timestamp()).
--
-- A name's holds are rows of `holds`: kind 'mutex' (the mutex and the fair lock, which
-- share their holds as in Java's layout), 'write', or 'read' (one row per reader, with
-- every read hold's own lease end in `lease_ends`, sorted). Kinds other than read and
-- write exclude each other.
--
-- Grants: each grant is known by the id of the acquire request that got it, and lives in
-- its hold's row: `holds.grants` lists the hold's live grants (a reader's `lease_ends`
-- has each one's own lease end, in the same order, earliest first), `holds.origin` is
-- the grant that began the hold and `holds.token` its fencing token. A grant is alive
-- while its id is in its hold's list: a hold that ended and began again is a new row
-- with a new list, so no grant of the old one is alive in it. A release ends exactly the
-- grant it names, only while it is alive. An acquire sent again after a lost reply finds
-- its grant alive in the list and answers as the first run did; one whose grant is gone
-- (its lease ended) runs again, as nobody learnt of the first grant.
--
-- The entry points, the functions a client calls (acquire, release, cancel_acquisition,
-- force_release, renew, raise_fencing, announce_client, lease_limit), run with `search_path`
-- pinned to pg_catalog (then pg_temp, which only a session's own temporary objects live
-- in): a function or operator planted in a schema on the caller's path, even one whose
-- argument types match a call better than PostgreSQL's own, is never called on lock
-- names. They run with their owner's rights (SECURITY DEFINER), the role that ran the
-- migration: a service's role needs no privilege on the tables beyond reading them, and
-- EXECUTE on the entry points (the migration revokes EXECUTE from PUBLIC on every
-- function), so that it can change a lock only as they do. The pinned path is what makes
-- that safe.
--
-- The helpers they call run inside them, with the path and the rights already set: no
-- SET clause of their own (each costs a configuration save and restore per call, and
-- keeps a SQL function from being inlined), and no EXECUTE for anyone but the owner.
--
-- Replies are arrays of bigint:
--   acquire: {1, holds, token, origin high 64 bits, origin low 64 bits} granted,
--            {0, ms the lock stays busy at most, 0} busy, {3, 0, 0} a reader asking for
--            the write lock (it would wait for itself), {5, 0, 0} the acquisition is
--            over (its grant ended, or it gave up);
--   release: {0, 0} not held (the grant is not alive), {1, holds left} still held,
--            {2, 0} released.
-- A release's reply is kept in `answers` for the window its client sends (twice its retry
-- window: the longest a copy of a request is assumed to take), under the grant it ended
-- (one release per grant: the guard's, or the undo of a grant nobody learnt of), so that
-- a release sent again answers as the first run, and a copy of the grant's acquire that
-- arrives after it (queued on an abandoned connection, second review N13) grants
-- nothing. An acquire needs no kept answer of its own (see Grants above): one row is
-- written per operation, where three were, and the uncontended pair is bounded by the
-- writes of its rows.

-- Makes the calling transaction's commit durable even where the server or the session
-- set synchronous_commit to off or local: a grant, renewal or fencing token lost in a
-- crash, or in a failover to a synchronous standby, would let a second holder in, or a
-- token go backwards.
CREATE OR REPLACE FUNCTION {schema}.durable()
RETURNS void LANGUAGE plpgsql
    AS $$
BEGIN
    IF current_setting('synchronous_commit') IN ('off', 'local') THEN
        PERFORM set_config('synchronous_commit', 'on', true);
    END IF;
END $$;

-- Sends `p_payload` on `p_channel`, unless the server's notification queue is filling up
-- (second review, N14): one listener that stopped reading (a paused process) holds every
-- notification after it in the queue, and once the queue is full every transaction that
-- notifies fails at commit, so every release in the database would. Waiters do not need
-- the message to be served: they ask again within the wait the busy reply gave them. The
-- limit is the share of the queue in use, `distlock.notify_queue_limit` (default 0.5).
CREATE OR REPLACE FUNCTION {schema}.notify(p_channel text, p_payload text)
RETURNS void LANGUAGE plpgsql
    AS $$
DECLARE
    v_limit double precision :=
        coalesce(nullif(current_setting('distlock.notify_queue_limit', true), ''), '0.5')::float8;
BEGIN
    IF pg_notification_queue_usage() < v_limit THEN
        PERFORM pg_notify(p_channel, p_payload);
    ELSE
        RAISE WARNING 'distlock: the notification queue is % percent full; % not notified',
            round(pg_notification_queue_usage()::numeric * 100, 1), p_channel;
    END IF;
END $$;

-- Ends the acquisitions `p_ids` of `p_name` for good: an acquisition is granted at most
-- once and never after it ended (given up, its handed hold lapsed or revoked, its hold
-- force-released), so a late copy of one of its attempts finds its answer here and
-- grants nothing (third review, R1 and R2), and a release of it ends nothing. Kept for a
-- minute: twice the longest retry window a client may set (lock-core's `Config`).
CREATE OR REPLACE FUNCTION {schema}.end_acquisitions(p_name text, p_ids uuid[], p_now timestamptz)
RETURNS void LANGUAGE sql
    AS $$
    INSERT INTO {schema}.answers (request, name, reply, expires_at)
    SELECT id, p_name, ARRAY[0, 0]::bigint[], p_now + interval '60 seconds'
      FROM unnest(p_ids) AS id
     WHERE id IS NOT NULL
    ON CONFLICT (request) DO NOTHING
$$;

-- Serializes on `p_name`, drops what expired, and returns the remembered reply of
-- `p_request` (NULL when it has none).
CREATE OR REPLACE FUNCTION {schema}.begin_op(p_name text, p_request uuid, p_now timestamptz)
RETURNS bigint[] LANGUAGE plpgsql
    AS $$
DECLARE
    v_reply bigint[];
BEGIN
    PERFORM {schema}.durable();
    PERFORM pg_catalog.pg_advisory_xact_lock(
        pg_catalog.hashtextextended('distlock:' || p_name, 0::bigint));
    IF p_request IS NOT NULL THEN
        -- Also an answer whose window ended but is not swept yet: the request ran, and
        -- running it again would grant twice, and then fail on the answer's key.
        SELECT reply INTO v_reply FROM {schema}.answers WHERE request = p_request;
        IF FOUND THEN
            RETURN v_reply;
        END IF;
    END IF;
    -- One look finds whether anything expired (mostly nothing has).
    IF EXISTS (SELECT 1 FROM {schema}.holds WHERE name = p_name
                  AND (expires_at <= p_now OR lease_ends[1] <= p_now)) THEN
        -- A hold that lapsed ends its grants: a take-up of a handed one, or a late copy
        -- of any one's acquire, must not be granted afresh under its id.
        PERFORM {schema}.end_acquisitions(p_name, ARRAY(
            SELECT g FROM {schema}.holds AS h, unnest(h.grants) AS g
             WHERE h.name = p_name AND h.expires_at <= p_now), p_now);
        DELETE FROM {schema}.holds WHERE name = p_name AND expires_at <= p_now;
        -- A reader whose row lives on may have grants whose own lease ended: they end
        -- (the first lease end is the earliest; the row's end is the latest, so one
        -- lives on).
        UPDATE {schema}.holds AS h
           SET grants = ARRAY(SELECT g FROM unnest(h.grants, h.lease_ends) u(g, e)
                               WHERE e > p_now ORDER BY e),
               lease_ends = ARRAY(SELECT e FROM unnest(h.lease_ends) e WHERE e > p_now ORDER BY e),
               holds = (SELECT count(*) FROM unnest(h.lease_ends) e WHERE e > p_now)
         WHERE name = p_name AND kind = 'read' AND lease_ends[1] <= p_now;
    END IF;
    RETURN NULL;
END $$;

-- Keeps `p_reply` as the answer of `p_request` for `p_window_ms`. Now and then (one call
-- in 64) it forgets up to 256 answers whose window ended, of any name, skipping those
-- another call is forgetting: enough to keep the table at about one window of traffic.
-- Sweeping a few on every call cost four times the insert, as each sweep walked the
-- index entries of the rows the sweeps before it had just deleted.
CREATE OR REPLACE FUNCTION {schema}.remember(
    p_request uuid, p_name text, p_reply bigint[], p_now timestamptz, p_window_ms bigint
) RETURNS bigint[] LANGUAGE plpgsql
    AS $$
BEGIN
    IF random() < 1.0 / 64 THEN
        DELETE FROM {schema}.answers WHERE request IN (
            SELECT request FROM {schema}.answers WHERE expires_at <= p_now
             ORDER BY expires_at LIMIT 256 FOR UPDATE SKIP LOCKED);
    END IF;
    INSERT INTO {schema}.answers (request, name, reply, expires_at)
    VALUES (p_request, p_name, p_reply, p_now + p_window_ms * interval '1 millisecond');
    RETURN p_reply;
END $$;

-- The busy reply: how long the name's holds last at most (NULL when it has none).
CREATE OR REPLACE FUNCTION {schema}.busy(p_name text, p_now timestamptz)
RETURNS bigint[] LANGUAGE sql
    AS $$
    SELECT ARRAY[0, greatest(1, ceil(extract(epoch FROM max(expires_at) - p_now) * 1000))::bigint, 0]
      FROM {schema}.holds WHERE name = p_name
    HAVING count(*) > 0
$$;

-- The two halves of a uuid as bigints, high first (a reply is an array of bigint).
CREATE OR REPLACE FUNCTION {schema}.uuid_halves(p_id uuid)
RETURNS bigint[] LANGUAGE sql IMMUTABLE
    AS $$
    SELECT ARRAY[('x' || substr(replace(p_id::text, '-', ''), 1, 16))::bit(64)::bigint,
                 ('x' || substr(replace(p_id::text, '-', ''), 17, 16))::bit(64)::bigint]
$$;

-- The longest lease a hold may have: `distlock.failover_quarantine_ms` (a setting of the
-- database or role, `ALTER DATABASE ... SET distlock.failover_quarantine_ms = ...`),
-- 60 s when unset. A failover's quarantine lasts this long, and no lease may be longer:
-- the quarantine must cover every lease the lost writes may have granted, and a record
-- of the longest lease granted is itself a write a failover can lose (third review, R4).
CREATE OR REPLACE FUNCTION {schema}.longest_lease()
RETURNS bigint LANGUAGE sql STABLE
    AS $$
    SELECT coalesce(nullif(pg_catalog.current_setting('distlock.failover_quarantine_ms', true),
                           ''), '60000')::bigint
$$;

-- Refuses a lease longer than `longest_lease` (SQLSTATE 22023, which the client reports
-- as an invalid argument).
CREATE OR REPLACE FUNCTION {schema}.check_lease(p_lease_ms bigint)
RETURNS void LANGUAGE plpgsql
    AS $$
DECLARE
    v_longest bigint := {schema}.longest_lease();
BEGIN
    IF p_lease_ms > v_longest THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('distlock: a lease of %s ms is longer than the longest lease, '
                             'distlock.failover_quarantine_ms = %s ms', p_lease_ms, v_longest);
    END IF;
END $$;

-- The longest lease, for a client to refuse longer ones before it sends them.
CREATE OR REPLACE FUNCTION {schema}.lease_limit()
RETURNS bigint LANGUAGE sql
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT {schema}.longest_lease()
$$;

-- The end of the failover quarantine, or NULL outside one (second review, N10). A
-- promotion of a standby, or a restore, may lose the last grants of the server before:
-- their holders still work, believing they hold, until their lease ends. Each call
-- compares the server's WAL timeline, which changes then, with the one `epoch` names;
-- on a change it starts a quarantine of `longest_lease` (no lease is longer), in which
-- no new hold is granted.
CREATE OR REPLACE FUNCTION {schema}.quarantine(p_now timestamptz, p_lease_ms bigint)
RETURNS timestamptz LANGUAGE plpgsql
    AS $$
DECLARE
    v_timeline integer :=
        ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::integer;
    v_system bigint;
    v_epoch {schema}.epoch%ROWTYPE;
BEGIN
    SELECT * INTO v_epoch FROM {schema}.epoch;
    -- The timeline is what a promotion or a restore with recovery changes; the system
    -- identifier (a read of the control file, as dear as the rest of this function) is
    -- only recorded.
    IF v_epoch.timeline IS DISTINCT FROM v_timeline THEN
        v_system := (SELECT system_identifier FROM pg_control_system());
        UPDATE {schema}.epoch
           SET system_identifier = v_system, timeline = v_timeline,
               quarantine_until = greatest(quarantine_until, p_now
                   + greatest(longest_lease_ms, {schema}.longest_lease())
                     * interval '1 millisecond')
         WHERE timeline <> v_timeline
        RETURNING * INTO v_epoch;
        IF FOUND THEN
            RAISE WARNING 'distlock: the server changed (system %, timeline %): no new lock '
                'is granted until %', v_system, v_timeline, v_epoch.quarantine_until;
        ELSE
            -- Another call started it first.
            SELECT * INTO v_epoch FROM {schema}.epoch;
        END IF;
    END IF;
    RETURN CASE WHEN v_epoch.quarantine_until > p_now THEN v_epoch.quarantine_until END;
END $$;

-- The reply of a grant alive in `p_hold`: granted, the hold's count, its fencing token
-- and its origin.
CREATE OR REPLACE FUNCTION {schema}.granted(p_hold {schema}.holds)
RETURNS bigint[] LANGUAGE sql
    AS $$
    SELECT ARRAY[1, p_hold.holds, p_hold.token] || {schema}.uuid_halves(p_hold.origin)
$$;

-- The next fencing token of `p_name`: at least the microseconds since the epoch, so that
-- a counter a failover rolled back (N10) still issues tokens above those its lost grants
-- had, as the quarantine's lease of time has passed since.
CREATE OR REPLACE FUNCTION {schema}.next_token(p_name text, p_now timestamptz)
RETURNS bigint LANGUAGE sql
    AS $$
    INSERT INTO {schema}.tokens AS t (name, token)
    VALUES (p_name, floor(extract(epoch FROM p_now) * 1000000)::bigint)
    ON CONFLICT (name) DO UPDATE SET token = greatest(t.token + 1, excluded.token)
    RETURNING token
$$;

-- Gives `p_owner` one more hold of kind `p_kind` (stored kind) on `p_name`, once the
-- caller decided it may have it, as grant `p_request`: a fresh hold (`p_fresh`, the
-- owner has none of this kind) is a new row with the next fencing token and this grant
-- as its origin; otherwise the grant joins the owner's row.
CREATE OR REPLACE FUNCTION {schema}.grant_hold(
    p_name text, p_owner text, p_kind text, p_lease_ms bigint, p_fencing boolean,
    p_request uuid, p_fresh boolean, p_now timestamptz
) RETURNS bigint[] LANGUAGE plpgsql
    AS $$
DECLARE
    v_end timestamptz := p_now + p_lease_ms * interval '1 millisecond';
    v_hold {schema}.holds%ROWTYPE;
    v_token bigint := 0;
BEGIN
    IF p_fresh THEN
        IF p_fencing THEN
            v_token := {schema}.next_token(p_name, p_now);
        END IF;
        INSERT INTO {schema}.holds
               (name, owner, kind, holds, expires_at, lease_ends, origin, grants, token)
        VALUES (p_name, p_owner, p_kind, 1, v_end,
                CASE WHEN p_kind = 'read' THEN ARRAY[v_end] END, p_request, ARRAY[p_request],
                v_token)
        RETURNING * INTO v_hold;
    ELSIF p_kind = 'read' THEN
        UPDATE {schema}.holds AS h
           SET grants = ARRAY(SELECT g FROM unnest(h.grants || p_request, h.lease_ends || v_end)
                                         u(g, e) ORDER BY e),
               lease_ends = ARRAY(SELECT e FROM unnest(h.lease_ends || v_end) e ORDER BY e),
               holds = h.holds + 1,
               expires_at = greatest(h.expires_at, v_end)
         WHERE name = p_name AND kind = 'read' AND owner = p_owner
        RETURNING * INTO v_hold;
    ELSE
        UPDATE {schema}.holds AS h
           SET grants = h.grants || p_request, holds = h.holds + 1,
               expires_at = greatest(h.expires_at, v_end)
         WHERE name = p_name AND kind = p_kind AND owner = p_owner
        RETURNING * INTO v_hold;
    END IF;
    RETURN {schema}.granted(v_hold);
END $$;

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

-- Hands a free `p_name` over to its first waiter that still keeps its place, and wakes
-- it: the hold is the waiter's acquisition's (its request id, its lease asked, fencing
-- as it asked), marked `handed` and lasting only the waiter's place (or its lease, if
-- shorter), until the waiter's next attempt, under the same id, finds it and takes it up
-- with its full lease. A waiter that has gone (gave up, crashed, paused) loses it when
-- that lapses, or at once when it cancels. A waiter of a client that asks under a new id
-- every attempt (`request` NULL), or one during the failover quarantine, is only woken.
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
    p_waits boolean, p_place_ms bigint, p_channel text, p_handover boolean, p_now timestamptz
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
    v_queued := EXISTS (SELECT 1 FROM {schema}.waiters WHERE name = p_name AND owner = p_owner);
    IF v_queued OR p_waits THEN
        INSERT INTO {schema}.waiters AS w
               (name, owner, channel, alive_until, request, lease_ms, fencing)
        VALUES (p_name, p_owner, p_channel, p_now + p_place_ms * interval '1 millisecond',
                CASE WHEN p_handover THEN p_request END, p_lease_ms, p_fencing)
        ON CONFLICT (name, owner) DO UPDATE
           SET alive_until = excluded.alive_until, channel = excluded.channel,
               request = excluded.request, lease_ms = excluded.lease_ms,
               fencing = excluded.fencing;
        IF v_head.owner IS NULL THEN
            SELECT * INTO v_head FROM {schema}.waiters WHERE name = p_name
             ORDER BY arrived LIMIT 1;
        END IF;
    END IF;
    -- Busy until the holds end, or, when free, until the head's place lapses.
    v_sleep := coalesce(({schema}.busy(p_name, p_now))[2],
        ceil(extract(epoch FROM v_head.alive_until - p_now) * 1000)::bigint,
        p_place_ms);
    IF v_queued OR p_waits THEN
        v_sleep := least(v_sleep, greatest(1, p_place_ms / 3));
    END IF;
    RETURN ARRAY[0, v_sleep, 0];
END $$;

-- Acquires `p_name` of kind `p_kind` ('mutex', 'fair', 'read' or 'write') for `p_owner`
-- (reentrant) as grant `p_request`; see the replies above. With `p_handover` the caller
-- asks under `p_request` for its whole acquisition, and a waiting mutex or fair lock is
-- handed over to it on release (see hand_over); its next attempt takes the handed hold
-- up.
CREATE OR REPLACE FUNCTION {schema}.acquire(
    p_name text, p_owner text, p_kind text, p_lease_ms bigint, p_fencing boolean,
    p_request uuid, p_window_ms bigint, p_waits boolean, p_place_ms bigint, p_channel text,
    p_handover boolean
) RETURNS bigint[] LANGUAGE plpgsql
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_reply bigint[];
    v_stored text := CASE p_kind WHEN 'fair' THEN 'mutex' ELSE p_kind END;
    v_own {schema}.holds%ROWTYPE;
    v_others boolean;
    v_quarantine timestamptz;
BEGIN
    PERFORM {schema}.check_lease(p_lease_ms);
    PERFORM {schema}.begin_op(p_name, NULL, v_now);
    -- Nothing is granted during a failover's quarantine, nor found again, nor re-entered:
    -- the hold found may be one whose release, or revocation, the failover lost.
    v_quarantine := {schema}.quarantine(v_now, p_lease_ms);
    IF v_quarantine IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM {schema}.answers WHERE request = p_request) THEN
            RETURN ARRAY[5, 0, 0];
        END IF;
        RETURN ARRAY[0, greatest(1, ceil(extract(epoch FROM v_quarantine - v_now) * 1000))::bigint, 0];
    END IF;
    SELECT * INTO v_own FROM {schema}.holds
     WHERE name = p_name AND kind = v_stored AND owner = p_owner;
    IF FOUND AND p_request = ANY (v_own.grants) THEN
        -- Found again, its grant alive (handed over while this acquisition waited, sent
        -- again after a lost reply, or a waiter's attempt after a late copy of an earlier
        -- one was granted): the hold gets this request's lease, never shortened, as its
        -- client counts the lease from this request.
        UPDATE {schema}.holds
           SET handed = false,
               expires_at = greatest(expires_at, v_now + p_lease_ms * interval '1 millisecond')
         WHERE name = p_name AND kind = v_stored AND owner = p_owner
        RETURNING * INTO v_own;
        RETURN {schema}.granted(v_own);
    END IF;
    IF EXISTS (SELECT 1 FROM {schema}.answers WHERE request = p_request) THEN
        -- A late copy of a request whose grant was released, or of an acquisition that
        -- ended without one: nobody waits for it, and nobody would release a second
        -- grant. Ended.
        RETURN ARRAY[5, 0, 0];
    END IF;
    IF v_own.owner IS NOT NULL THEN
        -- Reentry (outside a quarantine) is granted: the hold is there.
        RETURN {schema}.grant_hold(p_name, p_owner, v_stored, p_lease_ms, p_fencing, p_request,
                                   false, v_now);
    END IF;
    -- So is a writer's read hold (a downgrade).
    IF v_stored = 'read' AND EXISTS (SELECT 1 FROM {schema}.holds
                                      WHERE name = p_name AND kind = 'write' AND owner = p_owner) THEN
        RETURN {schema}.grant_hold(p_name, p_owner, v_stored, p_lease_ms, p_fencing, p_request,
                                   true, v_now);
    END IF;
    IF v_stored = 'mutex' THEN
        RETURN {schema}.acquire_fair(p_name, p_owner, p_lease_ms, p_fencing, p_request,
                                     p_waits, p_place_ms, p_channel, p_handover, v_now);
    END IF;
    -- Readers share with readers; any other hold excludes everyone else.
    v_others := EXISTS (SELECT 1 FROM {schema}.holds
                         WHERE name = p_name AND (v_stored <> 'read' OR kind <> 'read'));
    IF NOT v_others THEN
        RETURN {schema}.grant_hold(p_name, p_owner, v_stored, p_lease_ms, p_fencing, p_request,
                                   true, v_now);
    END IF;
    IF p_kind = 'write' AND EXISTS (SELECT 1 FROM {schema}.holds
                                     WHERE name = p_name AND owner = p_owner AND kind = 'read')
       AND NOT EXISTS (SELECT 1 FROM {schema}.holds WHERE name = p_name AND kind <> 'read') THEN
        RETURN ARRAY[3, 0, 0];
    END IF;
    v_reply := {schema}.busy(p_name, v_now);
    IF p_waits THEN
        -- Until it next asks (at the latest when the busy reply says, and a place's
        -- time more for a slow client), a release of the name notifies its channel.
        INSERT INTO {schema}.listening AS l (name, until)
        VALUES (p_name, v_now + (v_reply[2] + p_place_ms) * interval '1 millisecond')
        ON CONFLICT (name) DO UPDATE SET until = greatest(l.until, excluded.until);
    END IF;
    RETURN v_reply;
END $$;

-- Ends grant `p_grant` of `p_owner`'s hold of kind `p_kind` if it is alive. The last hold's
-- release of a mutex or a fair lock hands it over to the first waiter; a writer's wakes
-- every waiter on `p_channel`, the last reader's one.
CREATE OR REPLACE FUNCTION {schema}.release(
    p_name text, p_owner text, p_kind text, p_lease_ms bigint, p_window_ms bigint,
    p_grant uuid, p_channel text
) RETURNS bigint[] LANGUAGE plpgsql
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_reply bigint[];
    v_stored text := CASE p_kind WHEN 'fair' THEN 'mutex' ELSE p_kind END;
    v_hold {schema}.holds%ROWTYPE;
    v_at integer;
    v_ends timestamptz[];
BEGIN
    PERFORM {schema}.check_lease(p_lease_ms);
    v_reply := {schema}.begin_op(p_name, p_grant, v_now);
    IF v_reply IS NOT NULL THEN
        RETURN v_reply;
    END IF;
    SELECT * INTO v_hold FROM {schema}.holds
     WHERE name = p_name AND kind = v_stored AND owner = p_owner;
    v_at := array_position(v_hold.grants, p_grant);
    IF v_at IS NULL THEN
        v_reply := ARRAY[0, 0];
    ELSIF v_hold.holds > 1 AND v_stored = 'read' THEN
        -- The reader's row lasts as long as its latest grant left.
        v_ends := v_hold.lease_ends[:v_at - 1] || v_hold.lease_ends[v_at + 1:];
        UPDATE {schema}.holds
           SET grants = grants[:v_at - 1] || grants[v_at + 1:], lease_ends = v_ends,
               holds = holds - 1, expires_at = v_ends[cardinality(v_ends)]
         WHERE name = p_name AND kind = 'read' AND owner = p_owner;
        v_reply := ARRAY[1, v_hold.holds - 1];
    ELSIF v_hold.holds > 1 THEN
        UPDATE {schema}.holds
           SET grants = grants[:v_at - 1] || grants[v_at + 1:], holds = holds - 1,
               expires_at = greatest(expires_at, v_now + p_lease_ms * interval '1 millisecond')
         WHERE name = p_name AND kind = v_stored AND owner = p_owner;
        v_reply := ARRAY[1, v_hold.holds - 1];
    ELSE
        DELETE FROM {schema}.holds WHERE name = p_name AND kind = v_stored AND owner = p_owner;
        IF v_stored = 'mutex' THEN
            PERFORM {schema}.hand_over(p_name, v_now);
        ELSIF NOT {schema}.anyone_listening(p_name, v_now) THEN
            -- Nobody to wake: no NOTIFY, whose commit takes a lock every notifying
            -- transaction of the database queues on.
            NULL;
        ELSIF p_kind = 'write' THEN
            PERFORM {schema}.notify(p_channel, 'all');
        ELSIF NOT EXISTS (SELECT 1 FROM {schema}.holds WHERE name = p_name) THEN
            PERFORM {schema}.notify(p_channel, 'one');
        END IF;
        v_reply := ARRAY[2, 0];
    END IF;
    RETURN {schema}.remember(p_grant, p_name, v_reply, v_now, p_window_ms);
END $$;

-- A waiting acquisition `p_request` of `p_owner` gives up on a mutex or a fair lock: its
-- place in the queue goes, and a hold handed over to it and not taken up goes to the
-- next waiter. Only its own: a cancellation may arrive late (sent in the background, on
-- another pooled connection), after a later acquisition of the same owner (a holder
-- retrying under its own identity) took its place in the queue or was handed the lock,
-- and those are the later acquisition's. A waiter that does not name its acquisition
-- (`request` NULL: asked under a new id every attempt) is known by its owner alone and
-- is never handed a lock.
CREATE OR REPLACE FUNCTION {schema}.cancel_acquisition(p_name text, p_owner text, p_request uuid)
RETURNS void LANGUAGE plpgsql
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    PERFORM {schema}.begin_op(p_name, NULL, v_now);
    -- Its client holds nothing of it: the acquisition ends with its wait, and so does a
    -- grant it never learnt of (handed to it, or granted to a late copy of one of its
    -- attempts), its own grant alone.
    PERFORM {schema}.end_acquisitions(p_name, ARRAY[p_request], v_now);
    DELETE FROM {schema}.waiters
     WHERE name = p_name AND owner = p_owner AND (request IS NULL OR request = p_request);
    DELETE FROM {schema}.holds
     WHERE name = p_name AND owner = p_owner AND grants = ARRAY[p_request];
    UPDATE {schema}.holds
       SET grants = array_remove(grants, p_request), holds = holds - 1
     WHERE name = p_name AND owner = p_owner AND p_request = ANY (grants);
    IF NOT EXISTS (SELECT 1 FROM {schema}.holds WHERE name = p_name) THEN
        PERFORM {schema}.hand_over(p_name, v_now);
    END IF;
END $$;

-- Deletes every hold of `p_name` when a hold of kind `p_kind` is among them (for 'read',
-- when readers hold it and no writer); whether it did. A mutex or a fair lock is handed
-- over to its first waiter; a read-write lock's waiters are all told.
CREATE OR REPLACE FUNCTION {schema}.force_release(p_name text, p_kind text, p_channel text)
RETURNS boolean LANGUAGE plpgsql
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_found boolean;
    v_head {schema}.waiters%ROWTYPE;
BEGIN
    PERFORM {schema}.begin_op(p_name, NULL, v_now);
    v_found := CASE p_kind
        WHEN 'read' THEN
            EXISTS (SELECT 1 FROM {schema}.holds WHERE name = p_name AND kind = 'read')
            AND NOT EXISTS (SELECT 1 FROM {schema}.holds WHERE name = p_name AND kind = 'write')
        WHEN 'write' THEN
            EXISTS (SELECT 1 FROM {schema}.holds WHERE name = p_name AND kind = 'write')
        ELSE EXISTS (SELECT 1 FROM {schema}.holds WHERE name = p_name)
    END;
    IF NOT v_found THEN
        RETURN false;
    END IF;
    -- Every grant of the revoked holds ends: a take-up of a handed one, or a late copy
    -- of any one's acquire, is not granted again under its id (third review, R1).
    PERFORM {schema}.end_acquisitions(p_name, ARRAY(
        SELECT g FROM {schema}.holds AS h, unnest(h.grants) AS g WHERE h.name = p_name), v_now);
    DELETE FROM {schema}.holds WHERE name = p_name;
    IF p_kind IN ('mutex', 'fair') THEN
        -- Its first waiter is woken to ask; an operator's revocation hands nothing over.
        v_head := {schema}.queue_head(p_name, v_now);
        IF v_head.owner IS NOT NULL THEN
            PERFORM {schema}.notify(v_head.channel, 'one');
        END IF;
    ELSE
        PERFORM {schema}.notify(p_channel, 'all');
    END IF;
    RETURN true;
END $$;

-- Re-arms the lease of every listed hold still valid (never shortening it; a reader's
-- holds each get the lease) and returns those renewed, each with the grant that began
-- it (32 hex digits, as a request id is shown): a client whose hold began with another
-- grant learns that its own hold ended there and the owner's next one began.
CREATE OR REPLACE FUNCTION {schema}.renew(
    p_names text[], p_owners text[], p_kinds text[], p_lease_ms bigint
) RETURNS TABLE (renewed_name text, renewed_owner text, renewed_kind text, renewed_origin text)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_end timestamptz := v_now + p_lease_ms * interval '1 millisecond';
BEGIN
    PERFORM {schema}.check_lease(p_lease_ms);
    PERFORM {schema}.durable();
    -- A reader's grants each get the lease; those whose own lease ended, end.
    RETURN QUERY
    UPDATE {schema}.holds AS h
       SET expires_at = greatest(h.expires_at, v_end),
           grants = CASE WHEN h.kind = 'read' THEN ARRAY(
               SELECT g FROM unnest(h.grants, h.lease_ends) u(g, e) WHERE e > v_now ORDER BY e)
               ELSE h.grants END,
           lease_ends = CASE WHEN h.kind = 'read' THEN ARRAY(
               SELECT greatest(e, v_end) FROM unnest(h.lease_ends) e WHERE e > v_now ORDER BY 1)
               END,
           holds = CASE WHEN h.kind = 'read' THEN (
               SELECT count(*) FROM unnest(h.lease_ends) e WHERE e > v_now)
               ELSE h.holds END
      FROM unnest(p_names, p_owners, p_kinds) AS r(name, owner, kind)
     WHERE h.name = r.name AND h.owner = r.owner AND h.kind = r.kind AND h.expires_at > v_now
 RETURNING h.name, h.owner, h.kind, replace(h.origin::text, '-', '');
END $$;

-- Raises the fencing counter of `p_name` to at least `p_token`.
CREATE OR REPLACE FUNCTION {schema}.raise_fencing(p_name text, p_token bigint)
RETURNS void LANGUAGE plpgsql
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM {schema}.durable();
    INSERT INTO {schema}.tokens AS t (name, token) VALUES (p_name, p_token)
    ON CONFLICT (name) DO UPDATE SET token = greatest(t.token, excluded.token);
END $$;

-- What a client says about itself, for introspection, until `p_ttl_ms` from now;
-- descriptions whose time ended go at the same time.
CREATE OR REPLACE FUNCTION {schema}.announce_client(
    p_id text, p_name text, p_host text, p_pid integer, p_ttl_ms bigint)
RETURNS void LANGUAGE plpgsql
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    DELETE FROM {schema}.clients WHERE until < clock_timestamp();
    INSERT INTO {schema}.clients AS c (id, name, host, pid, until)
    VALUES (p_id, p_name, p_host, p_pid,
            clock_timestamp() + p_ttl_ms * interval '1 millisecond')
    ON CONFLICT (id) DO UPDATE
       SET name = excluded.name, host = excluded.host, pid = excluded.pid,
           until = excluded.until;
END $$;

-- Only the roles granted EXECUTE on the entry points (see `grants_sql`) may call them;
-- the helpers, only their owner.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA {schema} FROM PUBLIC;
