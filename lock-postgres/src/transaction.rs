//! Locks and ownership checks inside the caller's own transaction, so that a write and
//! the lock it needs cannot disagree.
//!
//! - [`lock`] and [`try_lock`]: `pg_advisory_xact_lock` (or its shared form) on the
//!   name's key, held until the caller's transaction ends, commit or rollback. The key
//!   is [advisory mode](crate::advisory)'s, so such a lock and an advisory-mode hold of
//!   the same name exclude each other; table-mode locks are rows and are not seen.
//! - [`holds`]: for table mode, whether the hold with a guard's fencing token is alive,
//!   asked inside the transaction that makes the protected write (etcd's `IsOwner()`
//!   comparison). Until that transaction ends, no operation on the name can run: the hold
//!   can be neither released, nor expire into another owner's hands, nor be
//!   force-released. Commit the write only when it answered `true`.
//!
//! Each takes any [`GenericClient`]: a `tokio_postgres::Transaction`, or a pooled
//! connection's (deadpool's wrap the same trait). Outside a transaction block each
//! statement is a transaction of its own, and the lock or the check ends with it.

use lock_core::{Error, LockName};
use tokio_postgres::GenericClient;
use tokio_postgres::types::Type;

use crate::advisory::key;
use crate::error::failed;
use crate::schema::SchemaName;

/// Which side of a name's lock: writers and the mutex take it exclusive, readers
/// shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mode {
    /// Excludes every other holder (`pg_advisory_xact_lock`).
    Exclusive,
    /// Shared with other shared holders (`pg_advisory_xact_lock_shared`).
    Shared,
}

/// Takes `name`'s lock for the rest of the caller's transaction, waiting as long as it
/// takes (bounded by the session's `lock_timeout` or `statement_timeout`, if set).
///
/// # Errors
///
/// [`ErrorKind::InvalidArgument`](lock_core::ErrorKind::InvalidArgument) for a name
/// lock-core refuses; the server's error (a lock timeout, a deadlock it detected) as a
/// backend error; connection errors.
///
/// # Cancel safety
///
/// Not cancel-safe: a dropped future may leave the statement running on the caller's
/// connection, and the lock it gets lasts until that transaction ends.
pub async fn lock(client: &impl GenericClient, name: &str, mode: Mode) -> Result<(), Error> {
    let function = match mode {
        Mode::Exclusive => "pg_advisory_xact_lock",
        Mode::Shared => "pg_advisory_xact_lock_shared",
    };
    let key = key_of(name)?;
    let statement = format!("SELECT pg_catalog.{function}($1)");
    client
        .query_typed(&statement, &[(&key, Type::INT8)])
        .await
        .map_err(|err| {
            failed(
                err,
                "taking a transaction's advisory lock",
                &SchemaName::default(),
            )
        })?;
    Ok(())
}

/// Takes `name`'s lock for the rest of the caller's transaction if it is free; answers
/// whether it did.
///
/// # Errors
///
/// As [`lock`].
///
/// # Cancel safety
///
/// Not cancel-safe, as [`lock`]: a lock taken by a dropped call lasts until the
/// transaction ends.
pub async fn try_lock(client: &impl GenericClient, name: &str, mode: Mode) -> Result<bool, Error> {
    let function = match mode {
        Mode::Exclusive => "pg_try_advisory_xact_lock",
        Mode::Shared => "pg_try_advisory_xact_lock_shared",
    };
    let key = key_of(name)?;
    let statement = format!("SELECT pg_catalog.{function}($1)");
    let during = "trying a transaction's advisory lock";
    let row = client
        .query_typed(&statement, &[(&key, Type::INT8)])
        .await
        .map_err(|err| failed(err, during, &SchemaName::default()))?
        .into_iter()
        .next()
        .ok_or_else(|| Error::protocol(format!("{during}: no row")))?;
    row.try_get(0)
        .map_err(|err| Error::protocol(format!("{during}: {err}")))
}

/// Whether table mode's hold of `name` with fencing token `token` (a guard's
/// [`fencing_token`](lock_core::Guard::fencing_token)) is alive, asked inside the
/// caller's transaction in the tables of `schema`; until that transaction ends, nothing
/// can end the hold (see the [module](self)). Keep the transaction short: operations on
/// the name, a waiter's grant included, wait for it.
///
/// # Errors
///
/// [`ErrorKind::InvalidArgument`](lock_core::ErrorKind::InvalidArgument) for a name
/// lock-core refuses, a token of 0 (what a hold without fencing carries) or one above
/// 2^63 - 1; a missing privilege (`EXECUTE` on
/// `holds_token`, which [`crate::schema::grants_sql`] grants) as a configuration error;
/// connection errors.
///
/// # Cancel safety
///
/// Cancel-safe: the check changes nothing, and the shared lock it takes ends with the
/// transaction.
pub async fn holds(
    client: &impl GenericClient,
    schema: &SchemaName,
    name: &str,
    token: u64,
) -> Result<bool, Error> {
    let name = LockName::new(name)?;
    if token == 0 {
        // Holds taken without fencing carry 0: it would name any of them.
        return Err(Error::invalid_argument(
            "token",
            "a fencing token is never 0: take the lock with fencing on (`fencing(true)`)",
        ));
    }
    let token = i64::try_from(token).map_err(|_| {
        Error::invalid_argument("token", "PostgreSQL keeps fencing tokens up to 2^63 - 1")
    })?;
    let during = "checking a hold in the caller's transaction";
    let statement = format!("SELECT {schema}.holds_token($1, $2)");
    let row = client
        .query_typed(
            &statement,
            &[(&name.as_str(), Type::TEXT), (&token, Type::INT8)],
        )
        .await
        .map_err(|err| failed(err, during, schema))?
        .into_iter()
        .next()
        .ok_or_else(|| Error::protocol(format!("{during}: no row")))?;
    row.try_get(0)
        .map_err(|err| Error::protocol(format!("{during}: {err}")))
}

/// The advisory key of `name`, refused as lock-core refuses names.
fn key_of(name: &str) -> Result<i64, Error> {
    Ok(key::of(&LockName::new(name)?))
}
