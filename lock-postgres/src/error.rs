//! The typed causes this crate puts in `lock_core::Error`'s source, for callers who
//! downcast.

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
    #[error("the database user lacks the {privilege} privilege on {on}")]
    MissingPrivilege {
        /// The privilege, such as `CREATE` (or `USAGE and CREATE` on a schema).
        privilege: &'static str,
        /// What it is needed on: `the database`, or `schema <name>`.
        on: String,
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
