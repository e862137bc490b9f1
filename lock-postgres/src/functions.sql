-- The reentrant mutex. Every function takes the name's transaction-scoped advisory lock
-- first, so that operations on one name run one after the other; expiries are on the
-- database clock (clock_timestamp()). A request id's answer is kept in `answers` for the
-- request's retry window, so that a request sent again after a lost reply answers as the
-- first run (answer = status or hold count, detail = fencing token or hold count).

-- Acquires `p_name` for `p_owner` (reentrant). Returns {1, holds, token} when granted,
-- {0, ms until the current holder's lease ends, 0} when another owner holds it.
CREATE OR REPLACE FUNCTION {schema}.mutex_acquire(
    p_name text, p_owner text, p_lease_ms bigint, p_fencing boolean, p_request uuid,
    p_window_ms bigint
) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_holds integer;
    v_token bigint := 0;
    v_ttl bigint;
    v_answer {schema}.answers%ROWTYPE;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('distlock:' || p_name, 0));
    SELECT * INTO v_answer FROM {schema}.answers
     WHERE request = p_request AND expires_at > v_now;
    IF FOUND THEN
        RETURN ARRAY[1, v_answer.answer, v_answer.detail];
    END IF;
    DELETE FROM {schema}.holds WHERE name = p_name AND expires_at <= v_now;
    SELECT ceil(extract(epoch FROM max(expires_at) - v_now) * 1000)::bigint INTO v_ttl
      FROM {schema}.holds WHERE name = p_name AND owner <> p_owner;
    IF v_ttl IS NOT NULL THEN
        RETURN ARRAY[0, v_ttl, 0];
    END IF;
    INSERT INTO {schema}.holds AS h (name, owner, kind, holds, expires_at)
    VALUES (p_name, p_owner, 'mutex', 1, v_now + p_lease_ms * interval '1 millisecond')
    ON CONFLICT (name, kind, owner) DO UPDATE
       SET holds = h.holds + 1, expires_at = greatest(h.expires_at, excluded.expires_at)
    RETURNING holds INTO v_holds;
    IF p_fencing THEN
        IF v_holds = 1 THEN
            INSERT INTO {schema}.tokens AS t (name, token) VALUES (p_name, 1)
            ON CONFLICT (name) DO UPDATE SET token = t.token + 1
            RETURNING token INTO v_token;
        ELSE
            SELECT token INTO v_token FROM {schema}.tokens WHERE name = p_name;
        END IF;
    END IF;
    DELETE FROM {schema}.answers WHERE name = p_name AND expires_at <= v_now;
    INSERT INTO {schema}.answers (request, name, answer, detail, expires_at)
    VALUES (p_request, p_name, v_holds, coalesce(v_token, 0),
            v_now + p_window_ms * interval '1 millisecond');
    RETURN ARRAY[1, v_holds, coalesce(v_token, 0)];
END $$;

-- Releases one hold of `p_owner` (or, with `p_undoes`, the grant of that request if it
-- is still remembered). Returns {0, 0} not held, {1, holds left} still held (its lease
-- re-armed), {2, 0} released (one waiter told on `p_channel`).
CREATE OR REPLACE FUNCTION {schema}.mutex_release(
    p_name text, p_owner text, p_lease_ms bigint, p_request uuid, p_window_ms bigint,
    p_undoes uuid, p_channel text
) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_holds integer;
    v_status bigint;
    v_answer {schema}.answers%ROWTYPE;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('distlock:' || p_name, 0));
    SELECT * INTO v_answer FROM {schema}.answers
     WHERE request = p_request AND expires_at > v_now;
    IF FOUND THEN
        RETURN ARRAY[v_answer.answer, v_answer.detail];
    END IF;
    DELETE FROM {schema}.holds WHERE name = p_name AND expires_at <= v_now;
    IF p_undoes IS NOT NULL THEN
        -- An undo releases only a grant still remembered, and forgets it.
        DELETE FROM {schema}.answers WHERE request = p_undoes AND expires_at > v_now;
        IF NOT FOUND THEN
            v_status := 0;
        END IF;
    END IF;
    IF v_status IS NULL THEN
        SELECT holds INTO v_holds FROM {schema}.holds
         WHERE name = p_name AND kind = 'mutex' AND owner = p_owner;
        IF NOT FOUND THEN
            v_status := 0;
        ELSIF v_holds > 1 THEN
            v_holds := v_holds - 1;
            UPDATE {schema}.holds
               SET holds = v_holds,
                   expires_at = greatest(expires_at, v_now + p_lease_ms * interval '1 millisecond')
             WHERE name = p_name AND kind = 'mutex' AND owner = p_owner;
            v_status := 1;
        ELSE
            v_holds := 0;
            DELETE FROM {schema}.holds
             WHERE name = p_name AND kind = 'mutex' AND owner = p_owner;
            PERFORM pg_notify(p_channel, 'one');
            v_status := 2;
        END IF;
    END IF;
    INSERT INTO {schema}.answers (request, name, answer, detail, expires_at)
    VALUES (p_request, p_name, v_status, coalesce(v_holds, 0),
            v_now + p_window_ms * interval '1 millisecond');
    RETURN ARRAY[v_status, coalesce(v_holds, 0)];
END $$;

-- Deletes every hold of `p_name`; whether there was one. Every waiter is told.
CREATE OR REPLACE FUNCTION {schema}.force_release(p_name text, p_channel text)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('distlock:' || p_name, 0));
    DELETE FROM {schema}.holds WHERE name = p_name AND expires_at > clock_timestamp();
    IF FOUND THEN
        PERFORM pg_notify(p_channel, 'all');
        DELETE FROM {schema}.holds WHERE name = p_name;
        RETURN true;
    END IF;
    DELETE FROM {schema}.holds WHERE name = p_name;
    RETURN false;
END $$;
