//! The statements the client sends itself (introspection: what `distlock show` and
//! `distlock ls` run; inspections; the migration's reads) resolve only to PostgreSQL's
//! own operators and functions, whatever a hostile role planted on the caller's
//! `search_path` (third review, R3). The entry points pin their path; these statements
//! are plain reads in the caller's session.

use std::sync::Arc;

use lock_core::Locks;
use lock_postgres::Connector;
use lock_testkit::{PostgresServer, postgres_client};

/// Objects a role that may create in `public` plants there: an operator and functions
/// whose argument types match the introspection statements' calls at least as well as
/// PostgreSQL's own, each recording who ran it.
const PLANTED: &str = "
    CREATE TABLE public.planted_calls (what text, by_role text);
    GRANT INSERT ON public.planted_calls TO PUBLIC;
    CREATE FUNCTION public.planted_mul(numeric, integer) RETURNS numeric
        LANGUAGE sql AS $$
            INSERT INTO public.planted_calls VALUES ('*', current_user);
            SELECT $1 OPERATOR(pg_catalog.*) $2::numeric $$;
    CREATE OPERATOR public.* (LEFTARG = numeric, RIGHTARG = integer,
                              FUNCTION = public.planted_mul);
    CREATE FUNCTION public.regexp_replace(text, varchar, varchar) RETURNS text
        LANGUAGE sql AS $$
            INSERT INTO public.planted_calls VALUES ('regexp_replace', current_user);
            SELECT pg_catalog.regexp_replace($1, $2::text, $3::text) $$;
    CREATE FUNCTION public.ceil(numeric) RETURNS numeric
        LANGUAGE sql AS $$
            INSERT INTO public.planted_calls VALUES ('ceil', current_user);
            SELECT pg_catalog.ceil($1) $$;
    CREATE FUNCTION public.textlike(text, varchar) RETURNS boolean
        LANGUAGE sql AS $$
            INSERT INTO public.planted_calls VALUES ('~~', current_user);
            SELECT pg_catalog.textlike($1, $2::text) $$;
    CREATE OPERATOR public.~~ (LEFTARG = text, RIGHTARG = varchar,
                               FUNCTION = public.textlike);
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn introspection_never_runs_what_is_planted_on_the_search_path() {
    let server = PostgresServer::start().await;
    let backend = Connector::new(server.url())
        .connect()
        .await
        .expect("connects");
    let locks = Locks::new(Arc::new(backend));
    let held = locks.mutex("ledger").lock().await.expect("free");
    let side_door = postgres_client(&server.url()).await;
    side_door.batch_execute(PLANTED).await.expect("planted");

    let info = locks.describe("ledger").await.expect("described");
    assert_eq!(info.holders.len(), 1, "{info:?}");
    assert!(info.lease_left.is_some() && info.holders[0].since.is_some());
    let names = locks.held_names("led", 10).await.expect("listed");
    assert_eq!(names, ["ledger"]);
    // An inspection (what `is_locked` and `remaining_lease` run) is a plain read too.
    let ledger = locks.mutex("ledger");
    assert!(ledger.is_locked().await.expect("inspected"));
    assert!(ledger.remaining_lease().await.expect("inspected").is_some());

    let ran: Vec<(String, String)> = side_door
        .query("SELECT what, by_role FROM public.planted_calls", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert!(
        ran.is_empty(),
        "introspection ran planted code with the describing role's rights: {ran:?}"
    );
    held.unlock().await.unwrap();
}
