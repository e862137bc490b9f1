-- The lock operations. Each public function is one statement of the client, atomic, and
-- starts with the name's transaction-scoped advisory lock (`name_key`: operations on one
-- name run one after the other); then the common cases are decided in one statement,
-- and the general path starts with `begin_op`: the answer of a request already run, and
-- the removal of what expired. Expiries are on the database clock (clock_timestamp()).
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
RETURNS void LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO {schema}.answers (request, name, reply, expires_at)
    SELECT id, p_name, ARRAY[0, 0]::bigint[], p_now + interval '60 seconds'
      FROM unnest(p_ids) AS id
     WHERE id IS NOT NULL
    ON CONFLICT (request) DO NOTHING;
END $$;

-- The key of the transaction-scoped advisory lock that serializes the operations on
-- `p_name`: every entry point takes it exclusive first (`holds_token` shared). One
-- expression, inlined where it is used.
CREATE OR REPLACE FUNCTION {schema}.name_key(p_name text)
RETURNS bigint LANGUAGE sql IMMUTABLE
    AS $$
    SELECT pg_catalog.hashtextextended('distlock:' || p_name, 0::bigint)
$$;

-- After the caller took the name's lock (`name_key`): drops what expired, and returns
-- the remembered reply of `p_request` (NULL when it has none).
CREATE OR REPLACE FUNCTION {schema}.begin_op(p_name text, p_request uuid, p_now timestamptz)
RETURNS bigint[] LANGUAGE plpgsql
    AS $$
DECLARE
    v_reply bigint[];
BEGIN
    PERFORM {schema}.durable();
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
RETURNS bigint[] LANGUAGE plpgsql
    AS $$
DECLARE
    v_until timestamptz;
BEGIN
    SELECT max(expires_at) INTO v_until FROM {schema}.holds WHERE name = p_name;
    IF v_until IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN ARRAY[0, greatest(1, ceil(extract(epoch FROM v_until - p_now) * 1000))::bigint, 0];
END $$;

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

-- The server's WAL timeline, which a promotion or a restore with recovery changes. One
-- expression, so that PostgreSQL inlines it into the queries that use it.
CREATE OR REPLACE FUNCTION {schema}.timeline()
RETURNS integer LANGUAGE sql
    AS $$
    SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::integer
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
    v_timeline integer := {schema}.timeline();
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

