-- The reply of a grant alive in `p_hold`: granted, the hold's count, its fencing token
-- and its origin.
CREATE OR REPLACE FUNCTION {schema}.granted(p_hold {schema}.holds)
RETURNS bigint[] LANGUAGE sql
    AS $$
    SELECT ARRAY[1, p_hold.holds, p_hold.token] || {schema}.uuid_halves(p_hold.origin)
$$;

-- The next fencing token of `p_name`: at least the microseconds since the epoch, so that
-- a counter a failover rolled back (N10) still issues tokens above those its lost grants
-- had, as the quarantine's lease of time has passed since. PL/pgSQL, as every helper
-- that is more than one expression: a SQL function that PostgreSQL cannot inline into
-- its caller is planned again in every transaction, and this one cost as much as the
-- rest of an acquire.
CREATE OR REPLACE FUNCTION {schema}.next_token(p_name text, p_now timestamptz)
RETURNS bigint LANGUAGE plpgsql
    AS $$
DECLARE
    v_token bigint;
BEGIN
    INSERT INTO {schema}.tokens AS t (name, token)
    VALUES (p_name, floor(extract(epoch FROM p_now) * 1000000)::bigint)
    ON CONFLICT (name) DO UPDATE SET token = greatest(t.token + 1, excluded.token)
    RETURNING token INTO v_token;
    RETURN v_token;
END $$;

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


-- Grant `p_request` of `p_owner`'s hold of kind `p_kind` (stored kind), found alive again:
-- handed over while its acquisition waited, sent again after a lost reply, or a waiter's
-- attempt after a late copy of an earlier one was granted. The hold gets this request's
-- lease, never shortened, as its client counts the lease from this request, and is
-- taken up. Returns the hold, or a row of NULLs when the grant is not alive in one.
CREATE OR REPLACE FUNCTION {schema}.found_again(
    p_name text, p_owner text, p_kind text, p_request uuid, p_lease_ms bigint,
    p_now timestamptz
) RETURNS {schema}.holds LANGUAGE plpgsql
    AS $$
DECLARE
    v_hold {schema}.holds%ROWTYPE;
BEGIN
    UPDATE {schema}.holds
       SET handed = false,
           expires_at = greatest(expires_at, p_now + p_lease_ms * interval '1 millisecond')
     WHERE name = p_name AND kind = p_kind AND owner = p_owner
       AND p_request = ANY (grants) AND expires_at > p_now
    RETURNING * INTO v_hold;
    RETURN v_hold;
END $$;
