//! How this crate turns the driver's and the server's errors into `lock_core::Error`.

use lock_core::Error;
use mysql_async::ServerError;

/// Server error codes this crate tells apart.
pub(crate) mod code {
    /// `ER_DBACCESS_DENIED_ERROR`: the user may not use the database.
    pub(crate) const DATABASE_ACCESS_DENIED: u16 = 1044;
    /// `ER_ACCESS_DENIED_ERROR`: wrong user or password.
    pub(crate) const ACCESS_DENIED: u16 = 1045;
    /// `ER_BAD_DB_ERROR`: no such database.
    pub(crate) const UNKNOWN_DATABASE: u16 = 1049;
    /// `ER_TABLEACCESS_DENIED_ERROR`: a statement needs a privilege on a table the user
    /// lacks.
    pub(crate) const TABLE_ACCESS_DENIED: u16 = 1142;
    /// `ER_BAD_NULL_ERROR`: a `NOT NULL` column set to `NULL` (a combined swap's row
    /// whose guards failed; the statement is rolled back).
    pub(crate) const BAD_NULL: u16 = 1048;
    /// `ER_DUP_ENTRY`: a row with this key exists (two clients created one name's row at
    /// once; the loser runs its transaction again).
    pub(crate) const DUPLICATE_KEY: u16 = 1062;
    /// `ER_LOCK_WAIT_TIMEOUT`: a row lock was not granted in time.
    pub(crate) const LOCK_WAIT_TIMEOUT: u16 = 1205;
    /// `ER_LOCK_DEADLOCK`: the transaction was chosen as a deadlock's victim and rolled
    /// back.
    pub(crate) const DEADLOCK: u16 = 1213;
    /// `ER_QUERY_INTERRUPTED`: `KILL QUERY` interrupted the statement (a wake-up, for the
    /// listening connection).
    pub(crate) const INTERRUPTED: u16 = 1317;
}

/// Whether the server refused the login: a configuration error, which retrying cannot
/// mend.
pub(crate) fn refuses_the_login(err: &ServerError) -> bool {
    matches!(
        err.code,
        code::ACCESS_DENIED | code::DATABASE_ACCESS_DENIED | code::UNKNOWN_DATABASE
    )
}

/// Whether running the transaction again may succeed where it failed: a deadlock's
/// victim, a row lock not granted in time, or the loser of two first writes of a name.
pub(crate) fn worth_another_run(err: &mysql_async::Error) -> bool {
    matches!(
        err,
        mysql_async::Error::Server(server)
            if matches!(server.code, code::DEADLOCK | code::LOCK_WAIT_TIMEOUT | code::DUPLICATE_KEY)
    )
}

/// A failed statement as the crate's error: a refused login is a configuration error, a
/// transaction the server rolled back (a deadlock, a lock wait) a retryable refusal, any
/// other refusal the server's, and the rest (I/O, a broken connection) a connection
/// error.
pub(crate) fn failed(err: mysql_async::Error, during: &'static str) -> Error {
    match &err {
        mysql_async::Error::Server(server) if refuses_the_login(server) => {
            Error::invalid_config("the MySQL server refused the login", Some(err.into()))
        }
        mysql_async::Error::Server(_) if worth_another_run(&err) => {
            Error::backend_retryable(during, err)
        }
        mysql_async::Error::Server(_) => Error::backend(during, err),
        mysql_async::Error::Url(_) => {
            Error::invalid_config("the MySQL URL cannot be read", Some(err.into()))
        }
        _ => Error::connection(during, err),
    }
}

/// The statement did not answer within `bound`.
#[derive(Debug, thiserror::Error)]
#[error("no answer within {bound:?}")]
pub(crate) struct Silent {
    pub(crate) bound: std::time::Duration,
}

/// A stored state the library cannot read (written by a newer version, or changed by
/// hand).
#[derive(Debug, thiserror::Error)]
#[error("the state stored for this name is not one this version wrote")]
pub(crate) struct Unreadable;
