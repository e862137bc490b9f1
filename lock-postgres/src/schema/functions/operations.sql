-- Acquires `p_name` of kind `p_kind` ('mutex', 'fair', 'read' or 'write') for `p_owner`
-- (reentrant) as grant `p_request`; see the replies above. With `p_handover` the caller
-- asks under `p_request` for its whole acquisition, and a waiting mutex or fair lock is
-- handed over to it on release (see hand_over); its next attempt takes the handed hold
-- up. `p_attempt` numbers the acquisition's attempts (0 when it does not wait): the
-- hand-over's message names the one the hand-over followed.
CREATE OR REPLACE FUNCTION {schema}.acquire(
    p_name text, p_owner text, p_kind text, p_lease_ms bigint, p_fencing boolean,
    p_request uuid, p_window_ms bigint, p_waits boolean, p_place_ms bigint, p_channel text,
    p_handover boolean, p_attempt integer
) RETURNS bigint[] LANGUAGE plpgsql
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_reply bigint[];
    v_stored text := CASE p_kind WHEN 'fair' THEN 'mutex' ELSE p_kind END;
    v_own {schema}.holds%ROWTYPE;
    v_others boolean;
    v_quarantine timestamptz;
    -- The common cases' look found the lease within the limit and no quarantine on:
    -- the general path need not check either again. For any kind but a reader it also
    -- looked for the request's grant alive again, and found none: `begin_op` only ends
    -- grants, so the general path need not look again either.
    v_settled boolean := false;
BEGIN
    PERFORM pg_catalog.pg_advisory_xact_lock({schema}.name_key(p_name));
    -- The common cases, each decided in one look when the lease is within the limit and
    -- no quarantine is on (the server on the timeline `epoch` names, its quarantine
    -- over; otherwise `quarantine` below decides, and starts one on a new timeline):
    -- what the general path below does then, less its helpers' calls, each of which
    -- costs a fresh transaction more than its query. First the uncontended grant: no
    -- hold of the name at all (not even an expired one), nobody queued for it, this
    -- request never answered.
    IF p_lease_ms <= {schema}.longest_lease()
       AND EXISTS (SELECT 1 FROM {schema}.epoch
                    WHERE timeline = {schema}.timeline() AND quarantine_until <= v_now) THEN
        v_settled := true;
        IF NOT EXISTS (SELECT 1 FROM {schema}.holds WHERE name = p_name)
           AND NOT EXISTS (SELECT 1 FROM {schema}.waiters WHERE name = p_name)
           AND NOT EXISTS (SELECT 1 FROM {schema}.answers WHERE request = p_request) THEN
            PERFORM {schema}.durable();
            RETURN {schema}.grant_hold(p_name, p_owner, v_stored, p_lease_ms, p_fencing,
                                       p_request, true, v_now);
        END IF;
        -- The take-up of a handed hold (or a request sent again after a lost reply): as
        -- below. Not for a reader, one of whose grants may have ended while its row
        -- lives on (`begin_op` ends it first).
        IF v_stored <> 'read' THEN
            v_own := {schema}.found_again(p_name, p_owner, v_stored, p_request, p_lease_ms,
                                          v_now);
            IF v_own.owner IS NOT NULL THEN
                PERFORM {schema}.durable();
                RETURN {schema}.granted(v_own);
            END IF;
        END IF;
    END IF;
    IF NOT v_settled THEN
        PERFORM {schema}.check_lease(p_lease_ms);
    END IF;
    PERFORM {schema}.begin_op(p_name, NULL, v_now);
    -- Nothing is granted during a failover's quarantine, nor found again, nor re-entered:
    -- the hold found may be one whose release, or revocation, the failover lost.
    IF NOT v_settled THEN
        v_quarantine := {schema}.quarantine(v_now, p_lease_ms);
    END IF;
    IF v_quarantine IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM {schema}.answers WHERE request = p_request) THEN
            RETURN ARRAY[5, 0, 0];
        END IF;
        RETURN ARRAY[0, greatest(1, ceil(extract(epoch FROM v_quarantine - v_now) * 1000))::bigint, 0];
    END IF;
    IF NOT (v_settled AND v_stored <> 'read') THEN
        v_own := {schema}.found_again(p_name, p_owner, v_stored, p_request, p_lease_ms, v_now);
        IF v_own.owner IS NOT NULL THEN
            RETURN {schema}.granted(v_own);
        END IF;
    END IF;
    SELECT * INTO v_own FROM {schema}.holds
     WHERE name = p_name AND kind = v_stored AND owner = p_owner;
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
                                     p_waits, p_place_ms, p_channel, p_handover, p_attempt,
                                     v_now);
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
        -- The refusal ends the acquisition: a late copy of this attempt, once the
        -- owner's reads ended, grants nothing.
        PERFORM {schema}.end_acquisitions(p_name, ARRAY[p_request], v_now);
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
    PERFORM pg_catalog.pg_advisory_xact_lock({schema}.name_key(p_name));
    -- The release of the name's last hold, decided in one statement: the grant is its
    -- hold's only one and alive, and no other hold of the name is there (not even an
    -- expired one, which `begin_op` would end first). A live grant has no kept answer
    -- (an answer is written only when its grant ends). Whoever queues or listens is
    -- then served as by the general path; mostly nobody does.
    IF p_lease_ms <= {schema}.longest_lease() THEN
        DELETE FROM {schema}.holds
         WHERE name = p_name AND kind = v_stored AND owner = p_owner
           AND grants = ARRAY[p_grant] AND expires_at > v_now
           AND NOT EXISTS (SELECT 1 FROM {schema}.holds AS o
                            WHERE o.name = p_name AND (o.kind <> v_stored OR o.owner <> p_owner));
        IF FOUND THEN
            PERFORM {schema}.durable();
            IF EXISTS (SELECT 1 FROM {schema}.waiters WHERE name = p_name)
               OR EXISTS (SELECT 1 FROM {schema}.listening WHERE name = p_name) THEN
                PERFORM {schema}.last_hold_went(p_name, p_kind, p_channel, v_now);
            END IF;
            RETURN {schema}.remember(p_grant, p_name, ARRAY[2, 0]::bigint[], v_now, p_window_ms);
        END IF;
    END IF;
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
        PERFORM {schema}.last_hold_went(p_name, p_kind, p_channel, v_now);
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
    PERFORM pg_catalog.pg_advisory_xact_lock({schema}.name_key(p_name));
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
    PERFORM pg_catalog.pg_advisory_xact_lock({schema}.name_key(p_name));
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

-- The next fencing token of `p_name` for a hold taken outside the tables (an advisory
-- lock, `AdvisoryBackend`): the same counter as the tables' holds, so that a name's
-- tokens never go backwards whichever mode took it, durable before the caller acts on it.
CREATE OR REPLACE FUNCTION {schema}.advisory_token(p_name text)
RETURNS bigint LANGUAGE plpgsql
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM {schema}.durable();
    RETURN {schema}.next_token(p_name, clock_timestamp());
END $$;

-- Whether the hold of `p_name` with fencing token `p_token` is alive, checked inside the
-- caller's own transaction (etcd's `IsOwner()` comparison): it takes the name's advisory
-- lock shared, which every operation on the name takes exclusive first, so until the
-- caller's transaction ends the hold can be neither released, nor expired into another
-- owner's hands, nor force-released, and a write committed with a true answer was made
-- under the lock. A hold handed over and not taken up yet counts: its waiter holds from
-- the hand-over's message. A token of 0 is a hold without one, never a proof.
CREATE OR REPLACE FUNCTION {schema}.holds_token(p_name text, p_token bigint)
RETURNS boolean LANGUAGE plpgsql
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM pg_catalog.pg_advisory_xact_lock_shared({schema}.name_key(p_name));
    RETURN p_token > 0
       AND EXISTS (SELECT 1 FROM {schema}.holds
                    WHERE name = p_name AND token = p_token
                      AND expires_at > pg_catalog.clock_timestamp());
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
