//! How this crate turns the server's errors into `lock_core::Error`, and the typed causes
//! it puts in their source for callers who downcast.

use lock_core::Error;
use tokio_postgres::error::{DbError, Severity, SqlState};

use crate::schema::name::SchemaName;

/// Why the lock tables cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// The server is older than the statements are written for.
    #[error("server_version_num {found}: at least {needed} is needed")]
    ServerTooOld {
        /// The server's `server_version_num`.
        found: i32,
        /// The oldest one supported.
        needed: i32,
    },
    /// The database user lacks a privilege the migration needs.
    #[error("the database user lacks {privilege} on {on}")]
    MissingPrivilege {
        /// The privilege: `CREATE`, `USAGE and CREATE` (on a schema) or `ownership`
        /// (migrating tables and functions another role made).
        privilege: &'static str,
        /// What it is needed on, as the server named it: `the database`, `schema s`,
        /// `table s.version`.
        on: String,
        /// What the server said.
        #[source]
        server: ServerMessage,
    },
    /// The tables were created by a newer version of this library.
    #[error("the lock tables are at version {found}; this library knows up to {known}")]
    Newer {
        /// The version found.
        found: i32,
        /// The newest this library knows.
        known: i32,
    },
    /// A table does not look as the library made it (changed by hand).
    #[error("table {table}: {problem}")]
    Changed {
        /// The table, with its schema.
        table: String,
        /// What differs.
        problem: String,
    },
}

/// The server's own words, kept as the cause of an error this crate describes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ServerMessage(pub String);

/// A failed statement as the crate's error: a refused login or a missing privilege is a
/// configuration error (retrying cannot help), a broken connection a connection error,
/// anything else the server's refusal.
pub(crate) fn failed(
    err: tokio_postgres::Error,
    during: &'static str,
    schema: &SchemaName,
) -> Error {
    match err.as_db_error() {
        Some(db) if refuses_the_login(db) => refused_login(err),
        Some(db) if *db.code() == SqlState::INSUFFICIENT_PRIVILEGE => missing_privilege(db, schema),
        Some(db) if ends_the_session(db) => Error::connection(during, err),
        // The functions' own refusal of a lease longer than the database allows.
        Some(db)
            if *db.code() == SqlState::INVALID_PARAMETER_VALUE
                && db.message().starts_with("distlock:") =>
        {
            Error::invalid_argument("lease", db.message().to_owned())
        }
        Some(_) => Error::backend(during, err),
        None => Error::connection(during, err),
    }
}

/// A failure to get a pooled connection, classified as [`failed`] classifies the
/// driver's error.
pub(crate) fn pool_failed(
    err: deadpool_postgres::PoolError,
    during: &'static str,
    schema: &SchemaName,
) -> Error {
    match err {
        deadpool_postgres::PoolError::Backend(err) => failed(err, during, schema),
        other => Error::connection(during, other),
    }
}

/// A connection the server refused at login: an unknown role or database, a wrong
/// password, no CONNECT privilege, or an address `pg_hba.conf` turns away.
pub(crate) fn refused_login(err: tokio_postgres::Error) -> Error {
    Error::invalid_config(
        "the PostgreSQL server refused the login (check the URL's user, password and database)",
        Some(err.into()),
    )
}

/// Whether the server refused the login itself, as opposed to failing to answer:
/// invalid authorization (class 28: unknown role, wrong password, `pg_hba.conf`), an unknown
/// database (3D000), or a database the role may not CONNECT to (a FATAL 42501).
pub(crate) fn refuses_the_login(db: &DbError) -> bool {
    let code = db.code();
    code.code().starts_with("28")
        || *code == SqlState::INVALID_CATALOG_NAME
        || (*code == SqlState::INSUFFICIENT_PRIVILEGE
            && matches!(db.parsed_severity(), Some(Severity::Fatal)))
}

/// A missing privilege, named from the server's message (`permission denied for
/// database d`, `... for schema s`, `... for table t`, `must be owner of table t`).
fn missing_privilege(db: &DbError, schema: &SchemaName) -> Error {
    let message = db.message();
    let object = message
        .strip_prefix("permission denied for ")
        .or_else(|| message.strip_prefix("must be owner of "));
    let (privilege, on) = match object {
        Some(object) if object.starts_with("database") => ("CREATE", "the database".to_owned()),
        Some(object) if object.starts_with("schema") => ("USAGE and CREATE", object.to_owned()),
        Some(object) => ("ownership", object.to_owned()),
        None => ("a privilege", format!("schema {schema}")),
    };
    Error::invalid_config(
        format!(
            "the database user may not create or migrate the lock tables in schema {schema}: \
             a role that may runs the migration once (see distlock::postgres::schema::migration_sql)"
        ),
        Some(
            SchemaError::MissingPrivilege {
                privilege,
                on,
                server: ServerMessage(message.to_owned()),
            }
            .into(),
        ),
    )
}

/// Whether the server ended the session with this error (an administrator's
/// `pg_terminate_backend`, a shutdown, a lost connection): the statement's outcome is then
/// as unknown as after a dropped connection, and sending it again on another connection
/// is what the request ids make safe.
pub(crate) fn ends_the_session(db: &DbError) -> bool {
    let code = db.code().code();
    matches!(
        db.parsed_severity(),
        Some(Severity::Fatal | Severity::Panic)
    ) || code.starts_with("08")
        || code.starts_with("57P")
}
