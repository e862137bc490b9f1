//! [`SchemaName`]: the schema the lock tables live in, checked before it is written into
//! a statement.

use std::fmt;

use lock_core::Error;

/// The default schema name.
pub const DEFAULT_SCHEMA: &str = "distlock";

/// A validated schema name: a plain lower-case SQL identifier, so that it can be written
/// into statements without quoting.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SchemaName(String);

impl SchemaName {
    /// Checks `name`: 1 to 63 characters of `a`-`z`, `0`-`9` and `_`, not starting
    /// with a digit, and not one of PostgreSQL's own (`pg_*`, `information_schema`).
    pub fn new(name: &str) -> Result<Self, Error> {
        let plain = name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        let starts_well = name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b == b'_');
        let reserved = name.starts_with("pg_") || name == "information_schema";
        if plain && starts_well && name.len() <= 63 && !reserved {
            Ok(Self(name.to_owned()))
        } else {
            Err(Error::invalid_config(
                format!(
                    "schema name {name:?}: use 1 to 63 of a-z, 0-9 and _, not starting with a \
                     digit, and not pg_* or information_schema"
                ),
                None,
            ))
        }
    }

    /// The name as written in statements.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for SchemaName {
    fn default() -> Self {
        Self(DEFAULT_SCHEMA.to_owned())
    }
}

impl fmt::Debug for SchemaName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for SchemaName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
