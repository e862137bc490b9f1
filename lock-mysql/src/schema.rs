//! The lock tables: their names (a prefix in the connection's database) and the
//! statements that create them.
//!
//! Five tables. `<prefix>names` keeps one row per lock name ever used: the name's state
//! machine as bytes (see lock-core's `protocol` module) and, for introspection, until
//! when its hold lasts. `<prefix>wakes` is each client's mailbox: a release that hands a
//! lock over (or frees it for a waiter) writes the waiter's notice there in its own
//! transaction, then interrupts the waiter's listening statement. `<prefix>clients`
//! keeps what clients say about themselves, for introspection. `<prefix>epoch` is one
//! row: the server that wrote the tables last (`@@server_id`) and until when nothing is
//! granted after a replica took over (see `store`). `<prefix>tokens` keeps the fencing
//! counters of the user-level lock mode (see `session`).

use std::fmt;

use lock_core::Error;

/// The tables' prefix by default.
pub const DEFAULT_PREFIX: &str = "distlock_";

/// The longest prefix: MySQL's identifiers have at most 64 characters.
const LONGEST_PREFIX: usize = 40;

/// The names of the lock tables: a prefix of ASCII letters, digits and underscores.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Tables {
    prefix: String,
}

impl fmt::Debug for Tables {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tables({}*)", self.prefix)
    }
}

impl Default for Tables {
    fn default() -> Self {
        Self {
            prefix: DEFAULT_PREFIX.to_owned(),
        }
    }
}

impl Tables {
    /// Tables named `<prefix>names` and `<prefix>wakes`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidConfig`](lock_core::ErrorKind::InvalidConfig) for a prefix that
    /// is empty, longer than 40 characters, or not made of ASCII letters, digits and
    /// underscores (it is written into statements unquoted by nothing else).
    pub fn with_prefix(prefix: &str) -> Result<Self, Error> {
        let fits = !prefix.is_empty()
            && prefix.len() <= LONGEST_PREFIX
            && prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !fits {
            return Err(Error::invalid_config(
                format!(
                    "table prefix {prefix:?}: use 1 to {LONGEST_PREFIX} ASCII letters, digits \
                     or underscores"
                ),
                None,
            ));
        }
        Ok(Self {
            prefix: prefix.to_owned(),
        })
    }

    /// The prefix.
    #[must_use]
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The table of names, quoted.
    pub(crate) fn names(&self) -> String {
        format!("`{}names`", self.prefix)
    }

    /// The table of wake-up notices, quoted.
    pub(crate) fn wakes(&self) -> String {
        format!("`{}wakes`", self.prefix)
    }

    /// The table of clients' descriptions, quoted.
    pub(crate) fn clients(&self) -> String {
        format!("`{}clients`", self.prefix)
    }

    /// The table of the serving server's identity and the failover quarantine, quoted.
    pub(crate) fn epoch(&self) -> String {
        format!("`{}epoch`", self.prefix)
    }

    /// The table of the user-level lock mode's fencing counters, quoted.
    pub(crate) fn tokens(&self) -> String {
        format!("`{}tokens`", self.prefix)
    }

    /// The statements that create the tables where they are missing (MariaDB 10.11 and
    /// MySQL 8.0 both accept them). `name` keeps the lock's name; `lock_key` is the
    /// name itself when it is short, else a digest of it (see `Key`).
    #[must_use]
    pub fn create_sql(&self) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {names} (
    lock_key VARBINARY(255) NOT NULL PRIMARY KEY,
    name VARBINARY(4096) NOT NULL,
    state MEDIUMBLOB NOT NULL,
    held_until BIGINT UNSIGNED NOT NULL DEFAULT 0
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS {wakes} (
    seq BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
    listener BINARY(16) NOT NULL,
    channel BLOB NOT NULL,
    handed BINARY(16) NULL,
    attempt INT UNSIGNED NOT NULL DEFAULT 0,
    token BIGINT UNSIGNED NULL,
    written TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    KEY by_listener (listener, seq),
    KEY by_age (written)
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS {clients} (
    id VARBINARY(255) NOT NULL PRIMARY KEY,
    name VARBINARY(1024) NOT NULL,
    host VARBINARY(1024) NOT NULL,
    pid INT UNSIGNED NOT NULL,
    until BIGINT UNSIGNED NOT NULL
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS {epoch} (
    id TINYINT UNSIGNED NOT NULL PRIMARY KEY,
    server_id INT UNSIGNED NOT NULL,
    quarantine_until BIGINT UNSIGNED NOT NULL
) ENGINE = InnoDB;
INSERT IGNORE INTO {epoch} (id, server_id, quarantine_until) VALUES (1, @@server_id, 0);
CREATE TABLE IF NOT EXISTS {tokens} (
    lock_key VARBINARY(255) NOT NULL PRIMARY KEY,
    token BIGINT UNSIGNED NOT NULL
) ENGINE = InnoDB;",
            tokens = self.tokens(),
            names = self.names(),
            wakes = self.wakes(),
            clients = self.clients(),
            epoch = self.epoch()
        )
    }
}

/// `bytes` as an SQL hexadecimal literal (`X'..'`): values go into the statements a
/// transaction sends in one round trip this way, never as text that needs escaping.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2 + 3);
    out.push_str("X'");
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
    out.push('\'');
    out
}

/// A lock name's primary key: the name's bytes when they fit in 255, else the byte
/// 0xFF (never in UTF-8, so never the start of a name) and the name's SHA-1.
pub(crate) fn key(name: &str) -> Vec<u8> {
    if name.len() <= 255 {
        return name.as_bytes().to_vec();
    }
    let mut key = vec![0xFF];
    key.extend_from_slice(&sha1_smol::Sha1::from(name).digest().bytes());
    key
}

#[cfg(test)]
mod tests {
    use super::{Tables, hex, key};

    #[test]
    fn prefixes_are_checked() {
        for good in ["distlock_", "a", "Locks_2", &"x".repeat(40)] {
            assert!(Tables::with_prefix(good).is_ok(), "{good}");
        }
        for bad in ["", "a-b", "a b", "`", "é", &"x".repeat(41)] {
            let err = Tables::with_prefix(bad).expect_err(bad);
            assert!(err.to_string().contains("prefix"), "{err}");
        }
    }

    #[test]
    fn keys_are_names_or_digests_that_no_name_starts_like() {
        assert_eq!(key("a"), b"a");
        assert_eq!(key(&"n".repeat(255)), "n".repeat(255).as_bytes());
        let long = key(&"n".repeat(256));
        assert_eq!(long.len(), 21);
        assert_eq!(long[0], 0xFF);
        assert_ne!(key(&"n".repeat(256)), key(&"m".repeat(256)));
        assert_eq!(hex(&[0, 0xab, 0x7f]), "X'00ab7f'");
        assert_eq!(hex(&[]), "X''");
    }
}
