//! The lock tables: created and migrated by the library itself, in a schema of the
//! user's choice, with a version row.
//!
//! Migrating takes a transaction-scoped advisory lock, so that clients starting together
//! migrate one after the other, and running it again changes nothing. A schema of a
//! newer version than this library knows, or tables changed by hand, are refused with a
//! typed error before anything is written.
//!
//! # Compatibility, from 0.1 on
//!
//! The tables are at version 1 and the functions at revision 1 in the first release;
//! everything before it was never released and is not migrated (drop a schema a
//! development build left: `DROP SCHEMA distlock CASCADE`).
//!
//! - Within one minor release (0.1.x) the tables and the entry points' signatures and
//!   answers do not change; a patch release may change function bodies, under a higher
//!   [`FUNCTIONS_REVISION`]. Clients of any 0.1.x work together, and the newest
//!   revision installed stays installed whichever client connects later.
//! - A minor release may append a step (a higher [`VERSION`]; a released step is never
//!   edited) and add entry points. Its functions keep every entry point of the previous
//!   minor release, with the same signature and answers, so that clients of that release
//!   still running keep working after the migration; they go in the minor release after.
//! - A client refuses tables newer than its own ([`SchemaError::Newer`]): instances of
//!   the previous minor release that restart after a newer one migrated do not start,
//!   so roll a minor release out by replacing instances, not by restarting old ones.

use lock_core::Error;
use tokio_postgres::{Client, GenericClient};

use crate::error::{SchemaError, failed};

pub(crate) mod name;
mod script;
pub use name::{DEFAULT_SCHEMA, SchemaName};
pub use script::{grants_sql, migration_sql, operator_grants_sql};

/// The oldest server the tables and statements are written for (`server_version_num`).
pub const OLDEST_SERVER: i32 = 130_000;

/// The schema version this library creates and understands.
pub const VERSION: i32 = 1;

/// The statements of each version, in order; `{schema}` stands for the schema name.
///
/// Version 1 is the baseline of the first release. From then on a step is only ever
/// appended, never edited: a database at any released version reaches the newest by
/// running the steps after its own.
const STEPS: [&str; 1] = [
    // Version 1.
    //
    // `holds`: a row per owner and kind holding a name (kind 'mutex' for the mutex and
    // the fair lock, which share their holds as in Java's layout, 'read' or 'write'):
    // how often it holds it, until when, its live grants (`grants`, the request ids that
    // got them; a reader's `lease_ends` has each one's own lease end in the same order),
    // the grant that began it (`origin`) with its fencing token, whether it was handed
    // over and not yet taken up (`handed`), and since when it is held.
    // `tokens`: the fencing counter of each name.
    // `waiters`: the queue of a mutex or a fair lock, each waiter with its wake-up
    // channel, how long its place lasts, what a hold handed over to it is made of
    // (its acquisition's id, lease and fencing), and the attempt that last kept its
    // place (a hand-over's message names it).
    // `answers`: the replies kept for requests sent again.
    // `listening`: until when someone waits on a name's channel (a release notifies only
    // then).
    // `epoch`: the server the holds were granted on (its system identifier and WAL
    // timeline, which a promotion or a restore changes), the end of the quarantine such a
    // change starts, and the longest lease granted, which the quarantine lasts at least.
    // `clients`: what each client said about itself (its name, host and process), until
    // when. `functions`: the revision of the installed functions.
    "CREATE TABLE {schema}.holds (
        name text NOT NULL,
        owner text NOT NULL,
        kind text NOT NULL CHECK (kind IN ('mutex', 'read', 'write')),
        holds integer NOT NULL CHECK (holds > 0),
        expires_at timestamptz NOT NULL,
        lease_ends timestamptz[],
        origin uuid,
        grants uuid[] NOT NULL DEFAULT '{}',
        token bigint NOT NULL DEFAULT 0,
        handed boolean NOT NULL DEFAULT false,
        since timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (name, kind, owner)
    );
    CREATE TABLE {schema}.tokens (
        name text PRIMARY KEY,
        token bigint NOT NULL
    );
    CREATE TABLE {schema}.waiters (
        name text NOT NULL,
        owner text NOT NULL,
        channel text NOT NULL,
        arrived bigserial NOT NULL,
        alive_until timestamptz NOT NULL,
        request uuid,
        lease_ms bigint,
        fencing boolean,
        attempt integer,
        PRIMARY KEY (name, owner)
    );
    CREATE INDEX waiters_in_order ON {schema}.waiters (name, arrived);
    CREATE TABLE {schema}.answers (
        request uuid PRIMARY KEY,
        name text NOT NULL,
        reply bigint[] NOT NULL,
        expires_at timestamptz NOT NULL
    );
    CREATE INDEX answers_by_expiry ON {schema}.answers (expires_at);
    CREATE TABLE {schema}.listening (
        name text PRIMARY KEY,
        until timestamptz NOT NULL
    );
    CREATE TABLE {schema}.epoch (
        one boolean PRIMARY KEY DEFAULT true CHECK (one),
        system_identifier bigint NOT NULL,
        timeline integer NOT NULL,
        quarantine_until timestamptz NOT NULL,
        longest_lease_ms bigint NOT NULL
    );
    INSERT INTO {schema}.epoch
    SELECT true, (SELECT system_identifier FROM pg_catalog.pg_control_system()),
           ('x' || substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8))
               ::bit(32)::integer,
           pg_catalog.clock_timestamp(), 0;
    CREATE TABLE {schema}.clients (
        id text PRIMARY KEY,
        name text NOT NULL,
        host text NOT NULL,
        pid integer NOT NULL,
        until timestamptz NOT NULL
    );
    CREATE TABLE {schema}.functions (
        revision integer NOT NULL,
        digest text NOT NULL
    );",
];

/// The revision of the lock functions (`functions/*.sql`), raised with every change to
/// them. A client replaces the installed functions only with a newer revision (or the
/// same revision changed, as while developing), so that during a rolling upgrade an
/// older client never puts its functions back under a newer one. An entry point's
/// parameters and answers therefore never change: a new signature is a new function,
/// and the old one stays for the clients of the previous minor release (see the module
/// documentation).
pub const FUNCTIONS_REVISION: i32 = 3;

/// The functions a client calls, each with a pinned `search_path` and its owner's
/// rights; a service's role gets EXECUTE on these alone (see [`grants_sql`]).
pub const ENTRY_POINTS: [&str; 10] = [
    "acquire",
    "release",
    "cancel_acquisition",
    "force_release",
    "renew",
    "raise_fencing",
    "announce_client",
    "lease_limit",
    "advisory_token",
    "holds_token",
];

/// The entry points only an operator's role may call ([`operator_grants_sql`]): a
/// service's role ([`grants_sql`]) never releases a lock it does not hold.
pub const OPERATOR_ENTRY_POINTS: [&str; 1] = ["force_release"];

/// The functions every operation is one call of (one statement, atomic, no session
/// state: usable through a transaction-mode pooler). Code rather than data: replaced
/// when a migration brings a newer revision ([`FUNCTIONS_REVISION`]). `{schema}` stands
/// for the schema name.
const FUNCTIONS: &str = concat!(
    // What every operation starts with: the name's advisory lock, expiries, kept
    // answers, durable commits, notifications, leases and the failover quarantine.
    include_str!("functions/common.sql"),
    // Grants: a hold's row, its grants and its fencing token.
    include_str!("functions/grants.sql"),
    // The queue of a mutex or a fair lock, and the hand-over to its first waiter.
    include_str!("functions/queue.sql"),
    // The entry points: acquire, release, cancel, force-release, renew, fencing, clients.
    include_str!("functions/operations.sql"),
);

/// What the tables must look like after migrating: table, column, type.
const EXPECTED: [(&str, &str, &str); 41] = [
    ("listening", "name", "text"),
    ("listening", "until", "timestamp with time zone"),
    ("epoch", "one", "boolean"),
    ("epoch", "system_identifier", "bigint"),
    ("epoch", "timeline", "integer"),
    ("epoch", "quarantine_until", "timestamp with time zone"),
    ("epoch", "longest_lease_ms", "bigint"),
    ("holds", "name", "text"),
    ("holds", "owner", "text"),
    ("holds", "kind", "text"),
    ("holds", "holds", "integer"),
    ("holds", "expires_at", "timestamp with time zone"),
    ("holds", "lease_ends", "ARRAY"),
    ("holds", "origin", "uuid"),
    ("holds", "grants", "ARRAY"),
    ("holds", "token", "bigint"),
    ("holds", "handed", "boolean"),
    ("holds", "since", "timestamp with time zone"),
    ("tokens", "name", "text"),
    ("tokens", "token", "bigint"),
    ("waiters", "name", "text"),
    ("waiters", "owner", "text"),
    ("waiters", "channel", "text"),
    ("waiters", "arrived", "bigint"),
    ("waiters", "alive_until", "timestamp with time zone"),
    ("waiters", "request", "uuid"),
    ("waiters", "lease_ms", "bigint"),
    ("waiters", "fencing", "boolean"),
    ("waiters", "attempt", "integer"),
    ("answers", "request", "uuid"),
    ("answers", "name", "text"),
    ("answers", "reply", "ARRAY"),
    ("answers", "expires_at", "timestamp with time zone"),
    ("clients", "id", "text"),
    ("clients", "name", "text"),
    ("clients", "host", "text"),
    ("clients", "pid", "integer"),
    ("clients", "until", "timestamp with time zone"),
    ("version", "version", "integer"),
    ("functions", "revision", "integer"),
    ("functions", "digest", "text"),
];

/// Creates or migrates the tables in `schema` and checks them; harmless to run again.
///
/// # Errors
///
/// [`ErrorKind::InvalidConfig`](lock_core::ErrorKind::InvalidConfig) with a
/// [`SchemaError`] source for a server older than [`OLDEST_SERVER`] or a missing
/// privilege (the source names it); [`ErrorKind::Incompatible`](lock_core::ErrorKind::Incompatible)
/// for a schema of a newer version or tables changed by hand; connection errors as
/// [`ErrorKind::Connection`](lock_core::ErrorKind::Connection). Nothing is written
/// unless every check passes.
///
/// # Cancel safety
///
/// Cancel-safe: the migration is one transaction; a dropped future leaves it rolled back
/// or committed whole.
pub async fn migrate(client: &mut Client, schema: &SchemaName) -> Result<(), Error> {
    // Tables and functions already current need nothing written, and so no privilege
    // beyond reading them: a service's role that another role migrated for connects.
    if is_current(client, schema).await? {
        return check_columns(client, schema).await;
    }
    // Unnamed, as every statement outside the migration's transaction: a named prepared
    // statement would not survive a transaction-mode pooler.
    let server: i32 = client
        .query_typed(
            "SELECT pg_catalog.current_setting('server_version_num'::text)::int",
            &[],
        )
        .await
        .map_err(|err| failed(err, "reading the server version", schema))?
        .first()
        .ok_or_else(|| Error::protocol("reading the server version: no row"))?
        .get(0);
    check_server(server)?;
    let during = "migrating the lock tables";
    let transaction = client
        .transaction()
        .await
        .map_err(|err| failed(err, during, schema))?;
    // One migrator at a time per schema: the key is the schema name's hash.
    transaction
        .execute(
            "SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext(
                 'distlock schema '::text OPERATOR(pg_catalog.||) $1::text))",
            &[&schema.as_str()],
        )
        .await
        .map_err(|err| failed(err, during, schema))?;
    let exists = transaction
        .query_opt(
            "SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname OPERATOR(pg_catalog.=) $1::name",
            &[&schema.as_str()],
        )
        .await
        .map_err(|err| failed(err, during, schema))?
        .is_some();
    if !exists {
        run(&transaction, "CREATE SCHEMA {schema}", schema).await?;
    }
    run(
        &transaction,
        "CREATE TABLE IF NOT EXISTS {schema}.version (version integer NOT NULL)",
        schema,
    )
    .await?;
    let found: Option<i32> = transaction
        .query_opt(
            &statement("SELECT version FROM {schema}.version", schema),
            &[],
        )
        .await
        .map_err(|err| failed(err, during, schema))?
        .map(|row| row.get(0));
    let found = found.unwrap_or(0);
    if found > VERSION {
        return Err(Error::incompatible(
            schema.as_str(),
            SchemaError::Newer {
                found,
                known: VERSION,
            },
        ));
    }
    for step in STEPS.iter().skip(usize::try_from(found).unwrap_or(0)) {
        run(&transaction, step, schema).await?;
    }
    if found < VERSION {
        run(&transaction, "DELETE FROM {schema}.version", schema).await?;
        transaction
            .execute(
                &statement("INSERT INTO {schema}.version VALUES ($1)", schema),
                &[&VERSION],
            )
            .await
            .map_err(|err| failed(err, during, schema))?;
    }
    check_columns(&transaction, schema).await?;
    install_functions(&transaction, schema).await?;
    transaction
        .commit()
        .await
        .map_err(|err| failed(err, during, schema))
}

/// Whether the tables are at [`VERSION`] and the functions at [`FUNCTIONS_REVISION`]
/// unchanged or newer: read without a transaction and without writing. Anything the
/// reader cannot see (no schema, no tables, no privilege to read them) is "not current",
/// and the migration that follows says what is missing.
async fn is_current(client: &Client, schema: &SchemaName) -> Result<bool, Error> {
    let read = client
        .query_typed(
            &statement(
                "SELECT v.version, f.revision, f.digest
                   FROM {schema}.version v, {schema}.functions f",
                schema,
            ),
            &[],
        )
        .await;
    let rows = match read {
        Ok(rows) => rows,
        Err(err) => {
            let err = failed(err, "reading the lock tables' version", schema);
            return if err.kind() == lock_core::ErrorKind::Connection {
                Err(err)
            } else {
                Ok(false)
            };
        }
    };
    let digest = functions_digest();
    Ok(rows.iter().any(|row| {
        let (version, revision, found): (i32, i32, String) = (row.get(0), row.get(1), row.get(2));
        version == VERSION
            && (revision > FUNCTIONS_REVISION
                || (revision == FUNCTIONS_REVISION && found == digest))
    }))
}

fn functions_digest() -> String {
    sha1_smol::Sha1::from(FUNCTIONS).digest().to_string()
}

/// Creates or replaces the functions unless those installed are of a newer revision, or
/// of this one and unchanged.
async fn install_functions(client: &impl GenericClient, schema: &SchemaName) -> Result<(), Error> {
    let during = "installing the lock functions";
    let digest = functions_digest();
    let installed = client
        .query_opt(
            &statement("SELECT revision, digest FROM {schema}.functions", schema),
            &[],
        )
        .await
        .map_err(|err| failed(err, during, schema))?
        .map(|row| (row.get::<_, i32>(0), row.get::<_, String>(1)));
    match installed {
        Some((revision, _)) if revision > FUNCTIONS_REVISION => {
            tracing::info!(
                schema = schema.as_str(),
                installed = revision,
                ours = FUNCTIONS_REVISION,
                "newer lock functions are installed; keeping them"
            );
            return Ok(());
        }
        Some((revision, found)) if revision == FUNCTIONS_REVISION && found == digest => {
            return Ok(());
        }
        _ => {}
    }
    run(client, FUNCTIONS, schema).await?;
    run(client, "DELETE FROM {schema}.functions", schema).await?;
    client
        .execute(
            &statement("INSERT INTO {schema}.functions VALUES ($1, $2)", schema),
            &[&FUNCTIONS_REVISION, &digest],
        )
        .await
        .map_err(|err| failed(err, during, schema))?;
    Ok(())
}

/// Refuses a server older than [`OLDEST_SERVER`] (`server_version_num`).
fn check_server(found: i32) -> Result<(), Error> {
    if found >= OLDEST_SERVER {
        return Ok(());
    }
    Err(Error::invalid_config(
        "the PostgreSQL server is too old for the lock tables",
        Some(
            SchemaError::ServerTooOld {
                found,
                needed: OLDEST_SERVER,
            }
            .into(),
        ),
    ))
}

/// Refuses tables whose columns are not the expected ones (changed by hand).
async fn check_columns(client: &impl GenericClient, schema: &SchemaName) -> Result<(), Error> {
    let rows = client
        // Unnamed (typed): the check also runs outside a transaction, where a named
        // prepared statement would not survive a transaction-mode pooler.
        .query_typed(
            "SELECT table_name::text, column_name::text, data_type::text
               FROM information_schema.columns
              WHERE table_schema::text OPERATOR(pg_catalog.=) $1::text",
            &[(&schema.as_str(), tokio_postgres::types::Type::TEXT)],
        )
        .await
        .map_err(|err| failed(err, "checking the lock tables", schema))?;
    let found: Vec<(String, String, String)> = rows
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect();
    for (table, column, kind) in EXPECTED {
        let present = found.iter().find(|(t, c, _)| t == table && c == column);
        let problem = match present {
            None => format!("column {column} is missing"),
            Some((_, _, actual)) if actual != kind => {
                format!("column {column} is {actual}, not {kind}")
            }
            Some(_) => continue,
        };
        return Err(Error::incompatible(
            format!("{schema}.{table}"),
            SchemaError::Changed {
                table: format!("{schema}.{table}"),
                problem,
            },
        ));
    }
    Ok(())
}

fn statement(template: &str, schema: &SchemaName) -> String {
    template.replace("{schema}", schema.as_str())
}

async fn run(
    client: &impl GenericClient,
    template: &str,
    schema: &SchemaName,
) -> Result<(), Error> {
    client
        .batch_execute(&statement(template, schema))
        .await
        .map_err(|err| failed(err, "migrating the lock tables", schema))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The entry points, and only they, pin the search path and run with their owner's
    /// rights: a helper with its own SET clause costs a save and restore per call, and
    /// an entry point without one could be called with a planted function on the path.
    #[test]
    fn exactly_the_entry_points_pin_the_path_and_run_as_their_owner() {
        let mut pinned = Vec::new();
        let mut found = Vec::new();
        for definition in FUNCTIONS
            .split("CREATE OR REPLACE FUNCTION {schema}.")
            .skip(1)
        {
            let name = definition.split('(').next().unwrap_or_default();
            let header = definition.split("$$").next().unwrap_or_default();
            found.push(name);
            if header.contains("SECURITY DEFINER SET search_path = pg_catalog, pg_temp") {
                pinned.push(name);
            } else {
                assert!(
                    !header.contains("SECURITY DEFINER") && !header.contains("SET search_path"),
                    "{name}: half a pin"
                );
            }
        }
        pinned.sort_unstable();
        let mut entry_points = ENTRY_POINTS.to_vec();
        entry_points.sort_unstable();
        assert_eq!(pinned, entry_points);
        assert!(found.len() > ENTRY_POINTS.len(), "{found:?}");
    }

    /// No PostgreSQL 12 is at hand to start; the check itself is what refuses it.
    #[test]
    fn a_server_before_13_is_refused_with_its_version() {
        assert!(check_server(150_019).is_ok());
        assert!(check_server(OLDEST_SERVER).is_ok());
        let err = check_server(120_017).expect_err("12 is too old");
        assert_eq!(err.kind(), lock_core::ErrorKind::InvalidConfig);
        let source =
            std::error::Error::source(&err).and_then(|source| source.downcast_ref::<SchemaError>());
        assert_eq!(
            source,
            Some(&SchemaError::ServerTooOld {
                found: 120_017,
                needed: OLDEST_SERVER
            })
        );
    }
}
